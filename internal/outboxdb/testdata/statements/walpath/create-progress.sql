-- walpath/create-progress
CREATE TABLE IF NOT EXISTS "outbox_events_wal_progress" (
	slot text PRIMARY KEY,
	created pg_snapshot,
	delivered pg_snapshot,
	confirmed_lsn pg_lsn,
	updated_at timestamptz NOT NULL DEFAULT now())
