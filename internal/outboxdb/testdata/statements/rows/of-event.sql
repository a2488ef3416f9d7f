-- rows/of-event
SELECT o.id, o.event_id, o.event_name, o.event_version, o.topic, o.aggregate_type, o.aggregate_id,
		o.payload::text, o.headers::text, coalesce(o.readable_from, 0), coalesce(o.aggregate_seq, 0), o.created_at,
		o.available_at, o.attempts, coalesce(o.last_error, ''), o.delivered_at, o.delivered_at IS NOT NULL FROM "outbox_events" o WHERE o.event_id = $1
