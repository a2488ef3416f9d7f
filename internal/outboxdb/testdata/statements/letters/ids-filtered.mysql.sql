-- letters/ids-filtered
SELECT id FROM `outbox_dead_letters` WHERE source = ?1 AND event_name = ?2 AND LOCATE(?3, reason) > 0 AND created_at >= ?4 AND created_at < ?5 AND retried_at IS NULL AND discarded_at IS NULL ORDER BY id LIMIT 100
