-- lag/count
WITH numbered AS (
			SELECT topic, sum(last_seq) AS n FROM "outbox_aggregate_sequences" GROUP BY topic
		), applied AS (
			SELECT consumer, topic, sum(last_seq) AS n FROM "outbox_consumer_positions" GROUP BY consumer, topic
		)
		SELECT a.consumer, a.topic, greatest(s.n - a.n, 0)::bigint
		FROM applied a JOIN numbered s USING (topic) ORDER BY a.consumer, a.topic
