-- fastpath/end-memberships
DELETE FROM "outbox_events_relays" WHERE topic = $1 AND relay = ANY($2)
