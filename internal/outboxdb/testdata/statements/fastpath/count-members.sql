-- fastpath/count-members
SELECT count(*) FROM "outbox_events_relays" WHERE topic = $1
