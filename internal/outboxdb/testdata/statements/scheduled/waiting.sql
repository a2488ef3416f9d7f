-- scheduled/waiting
SELECT topic, count(*), count(*) FILTER (WHERE deliver_at <= $2), min(deliver_at)
		FROM (SELECT topic, deliver_at FROM "outbox_scheduled_events"
			WHERE cancelled_at IS NULL ORDER BY deliver_at, id LIMIT $1) s
		GROUP BY topic ORDER BY min(deliver_at), topic
