-- order/start-aggregate
WITH started AS (UPDATE "outbox_consumer_positions" SET last_seq = waiting_seq - 1, updated_at = now()
			WHERE consumer = $1 AND topic = $2 AND aggregate_type = $3 AND aggregate_id = $4
				AND last_seq = 0 AND held_seq IS NULL AND waiting_seq > 1
				AND waiting_since <= now() - make_interval(secs => $5)
			RETURNING consumer, topic, aggregate_type, aggregate_id, waiting_seq)
		SELECT waiting_seq FROM started CROSS JOIN LATERAL pg_notify('outbox_consumer_positions', json_build_object('schema', current_schema(), 'consumer', started.consumer, 'topic', started.topic, 'aggregate_type', started.aggregate_type, 'aggregate_id', started.aggregate_id, 'last_seq', started.waiting_seq - 1, 'waiting_seq', started.waiting_seq)::text)
