-- order/hold
UPDATE "outbox_consumer_positions" SET held_seq = $2, held_event_id = $3, held_at = now(), updated_at = now()
		WHERE id = $1
