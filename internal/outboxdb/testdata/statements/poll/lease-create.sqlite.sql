-- poll/lease-create
CREATE TABLE IF NOT EXISTS "outbox_events_relay_lease" (
		id INTEGER PRIMARY KEY CHECK (id = 1), holder TEXT NOT NULL, until TEXT NOT NULL)
