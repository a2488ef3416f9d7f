-- walpath/progress-save
INSERT INTO "outbox_events_wal_progress"
	(slot, delivered, confirmed_lsn, updated_at) VALUES ($1, $2::pg_snapshot, $3::pg_lsn, now())
	ON CONFLICT (slot) DO UPDATE SET delivered = EXCLUDED.delivered, confirmed_lsn = EXCLUDED.confirmed_lsn,
		updated_at = now()
