-- order/start-aggregate
UPDATE "outbox_consumer_positions" SET last_seq = waiting_seq - 1, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
			WHERE consumer = ?1 AND topic = ?2 AND aggregate_type = ?3 AND aggregate_id = ?4
				AND last_seq = 0 AND held_seq IS NULL AND waiting_seq > 1
				AND julianday(waiting_since) <= julianday('now') - ?5 / 86400.0
			RETURNING waiting_seq
