-- order/lock-position-create
INSERT INTO "outbox_consumer_positions" (consumer, topic, aggregate_type, aggregate_id, last_seq, updated_at)
		VALUES (?1, ?2, ?3, ?4, 0, strftime('%Y-%m-%d %H:%M:%f', 'now')) ON CONFLICT (consumer, topic, aggregate_type, aggregate_id) DO NOTHING
