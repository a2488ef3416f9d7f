-- order/lock-position
SELECT p.id, p.last_seq, p.held_seq, p.held_event_id, TIMESTAMPDIFF(MICROSECOND, p.waiting_since, UTC_TIMESTAMP(6)) / 1000000,
			EXISTS (SELECT 1 FROM `outbox_dead_letters` WHERE event_id = ?5 AND source = ?1),
			CASE WHEN p.held_seq IS NOT NULL OR ?6 > p.last_seq + 1 THEN EXISTS (SELECT 1 FROM `outbox_dead_letters`
				WHERE source IN (?1, 'relay') AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
					AND aggregate_seq = p.last_seq + 1 AND discarded_at IS NOT NULL AND retried_at IS NULL)
				AND NOT EXISTS (SELECT 1 FROM `outbox_dead_letters` WHERE source = ?1 AND topic = ?2
					AND aggregate_type = ?3 AND aggregate_id = ?4 AND aggregate_seq = p.last_seq + 1
					AND event_id IS NOT NULL AND discarded_at IS NULL AND retried_at IS NULL) ELSE 0 END
		FROM `outbox_consumer_positions` p
		WHERE p.consumer = ?1 AND p.topic = ?2 AND p.aggregate_type = ?3 AND p.aggregate_id = ?4 FOR UPDATE
