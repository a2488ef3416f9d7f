-- lag/count
WITH numbered AS (
			SELECT topic, SUM(last_seq) AS n FROM `outbox_aggregate_sequences` GROUP BY topic
		), applied AS (
			SELECT consumer, topic, SUM(last_seq) AS n FROM `outbox_consumer_positions` GROUP BY consumer, topic
		)
		SELECT a.consumer, a.topic, CAST(GREATEST(s.n - a.n, 0) AS SIGNED)
		FROM applied a JOIN numbered s ON s.topic = a.topic ORDER BY a.consumer, a.topic
