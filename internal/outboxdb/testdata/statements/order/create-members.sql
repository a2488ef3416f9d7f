-- order/create-members
CREATE TABLE IF NOT EXISTS "outbox_consumer_positions_members" (
			consumer text NOT NULL,
			topic text NOT NULL,
			member text NOT NULL,
			until timestamptz NOT NULL,
			PRIMARY KEY (consumer, topic, member))
