-- fastpath/drop-expired
DELETE FROM "outbox_events_relays" WHERE topic = $1 AND until < now()
