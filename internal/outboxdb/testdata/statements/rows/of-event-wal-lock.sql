-- rows/of-event-wal-lock
SELECT o.id, o.event_id, o.event_name, o.event_version, o.topic, o.aggregate_type, o.aggregate_id,
		o.payload::text, o.headers::text, coalesce(o.readable_from, 0), coalesce(o.aggregate_seq, 0), o.created_at,
		o.available_at, o.attempts, coalesce(o.last_error, ''), o.delivered_at, (o.delivered_at IS NOT NULL OR EXISTS (SELECT 1 FROM "outbox_events_wal_progress" wp WHERE wp.created IS NOT NULL AND wp.delivered IS NOT NULL AND o.delivered_at IS NULL AND o.transaction_id >= pg_snapshot_xmin(wp.created) AND o.transaction_id < pg_snapshot_xmax(wp.delivered) AND pg_visible_in_snapshot(o.transaction_id, wp.delivered) AND NOT pg_visible_in_snapshot(o.transaction_id, wp.created))) FROM "outbox_events" o WHERE o.event_id = $1 FOR UPDATE OF o
