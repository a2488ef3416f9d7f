-- lag/locate
SELECT c.consumer, c.topic, count(*), min(o.created_at)
		FROM "outbox_events" o JOIN unnest($3::text[], $4::text[]) AS c(consumer, topic) ON c.topic = o.topic
		WHERE o.id >= $1 AND o.id < $2 AND o.aggregate_seq > coalesce((SELECT p.last_seq FROM "outbox_consumer_positions" p
			WHERE p.consumer = c.consumer AND p.topic = o.topic AND p.aggregate_type = o.aggregate_type
			AND p.aggregate_id = o.aggregate_id), 0)
		GROUP BY c.consumer, c.topic
