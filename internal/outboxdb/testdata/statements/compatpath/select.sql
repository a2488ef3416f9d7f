-- compatpath/select
SELECT * FROM (
		WITH last_processed AS (/* the offsets adapter's next offset query */)
		SELECT id, transaction_id, event_id, event_name, event_version, topic,
			aggregate_type, aggregate_id, payload, headers, created_at, readable_from, aggregate_seq
		FROM "outbox_events"
		WHERE (
			(transaction_id = (SELECT last_processed_transaction_id FROM last_processed)
				AND id > (SELECT offset_acked FROM last_processed))
			OR transaction_id > (SELECT last_processed_transaction_id FROM last_processed)
		)
		AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
	) AS messages
	ORDER BY transaction_id ASC, id ASC
	LIMIT 100
