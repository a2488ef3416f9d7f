-- walpath/register-slot
INSERT INTO "outbox_events_wal_progress" (slot) VALUES ($1)
	ON CONFLICT (slot) DO NOTHING
