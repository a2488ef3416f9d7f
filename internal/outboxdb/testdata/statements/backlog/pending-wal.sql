-- backlog/pending-wal
SELECT topic, count(*), min(created_at) FROM (
			SELECT o.id, o.topic, o.created_at FROM "outbox_events" o WHERE o.delivered_at IS NULL AND NOT EXISTS (SELECT 1 FROM "outbox_events_wal_progress" wp WHERE wp.created IS NOT NULL AND wp.delivered IS NOT NULL AND o.delivered_at IS NULL AND o.transaction_id >= pg_snapshot_xmin(wp.created) AND o.transaction_id < pg_snapshot_xmax(wp.delivered) AND pg_visible_in_snapshot(o.transaction_id, wp.delivered) AND NOT pg_visible_in_snapshot(o.transaction_id, wp.created)) ORDER BY o.id LIMIT $1) o
		GROUP BY topic ORDER BY topic
