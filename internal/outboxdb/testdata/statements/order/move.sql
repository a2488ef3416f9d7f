-- order/move
UPDATE "outbox_consumer_positions" AS p SET last_seq = $2::bigint, waiting_since = CASE WHEN p.waiting_seq > $2::bigint THEN now() END,
		waiting_seq = CASE WHEN p.waiting_seq IS NOT NULL THEN
			(SELECT CASE WHEN p.waiting_seq > $2::bigint THEN p.waiting_seq END FROM pg_notify('outbox_consumer_positions', json_build_object('schema', current_schema(), 'consumer', p.consumer, 'topic', p.topic, 'aggregate_type', p.aggregate_type, 'aggregate_id', p.aggregate_id, 'last_seq', $2::bigint, 'waiting_seq', CASE WHEN p.waiting_seq > $2::bigint THEN p.waiting_seq END)::text)) END,
			held_event_id = CASE WHEN held_seq = $2::bigint THEN NULL ELSE held_event_id END,
			held_at = CASE WHEN held_seq = $2::bigint THEN NULL ELSE held_at END,
			held_seq = CASE WHEN held_seq = $2::bigint THEN NULL ELSE held_seq END,
			updated_at = now()
		WHERE id = $1
