-- walpath/slot-start
SELECT created::text FROM "outbox_events_wal_progress" WHERE slot = $1
