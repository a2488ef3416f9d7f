-- order/hold
UPDATE "outbox_consumer_positions" SET held_seq = ?2, held_event_id = ?3, held_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = ?1
