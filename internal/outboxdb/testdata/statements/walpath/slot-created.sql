-- walpath/slot-created
INSERT INTO "outbox_events_wal_progress"
	(slot, created, delivered, confirmed_lsn, updated_at) VALUES ($1, $2::pg_snapshot, NULL, NULL, now())
	ON CONFLICT (slot) DO UPDATE SET created = EXCLUDED.created, delivered = NULL, confirmed_lsn = NULL,
		updated_at = now()
