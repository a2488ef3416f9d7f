-- fastpath/create-leases
CREATE TABLE IF NOT EXISTS "outbox_events_partitions" (
	topic text NOT NULL, -- '' for the subscriptions to every topic
	partition int NOT NULL,
	relay text NOT NULL DEFAULT '', -- '' while nobody owns it
	until timestamptz NOT NULL DEFAULT '-infinity',
	PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS "outbox_events_relays" (
	topic text NOT NULL,
	relay text NOT NULL,
	until timestamptz NOT NULL,
	PRIMARY KEY (topic, relay));
-- Members that hold a liveness lock (see liveness): the others
-- (relays of earlier versions) are only ever taken over by lease.
ALTER TABLE "outbox_events_relays" ADD COLUMN IF NOT EXISTS live_lock boolean NOT NULL DEFAULT false
