-- backlog/pending
SELECT topic, count(*), min(created_at) FROM (
			SELECT o.id, o.topic, o.created_at FROM "outbox_events" o WHERE o.delivered_at IS NULL ORDER BY o.id LIMIT $1) o
		GROUP BY topic ORDER BY topic
