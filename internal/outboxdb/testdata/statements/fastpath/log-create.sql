-- fastpath/log-create
CREATE TABLE IF NOT EXISTS "outbox_events_delivered" (id bigint PRIMARY KEY);
CREATE TABLE IF NOT EXISTS "outbox_events_delivered_to" (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	upto bigint NOT NULL,
	snap pg_snapshot NOT NULL);
INSERT INTO "outbox_events_delivered_to" (upto, snap) VALUES (0, pg_current_snapshot()) ON CONFLICT DO NOTHING
