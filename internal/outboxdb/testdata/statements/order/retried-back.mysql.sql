-- order/retried-back
SELECT EXISTS (SELECT 1 FROM `outbox_dead_letters` WHERE source = ?1 AND retried_event_id = ?2
				AND retried_at > UTC_TIMESTAMP(6) - INTERVAL CAST(?3 * 1000000 AS SIGNED) MICROSECOND)
			AND NOT EXISTS (SELECT 1 FROM `outbox_dead_letters` WHERE source = ?1 AND event_id = ?2)
