-- order/hold
UPDATE `outbox_consumer_positions` SET held_seq = ?2, held_event_id = ?3, held_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) WHERE id = ?1
