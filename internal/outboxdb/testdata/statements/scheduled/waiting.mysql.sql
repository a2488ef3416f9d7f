-- scheduled/waiting
SELECT topic, COUNT(*), CAST(SUM(deliver_at <= ?2) AS SIGNED), MIN(deliver_at)
		FROM (SELECT topic, deliver_at FROM `outbox_scheduled_events`
			WHERE cancelled_at IS NULL ORDER BY deliver_at, id LIMIT ?1) s
		GROUP BY topic ORDER BY MIN(deliver_at), topic
