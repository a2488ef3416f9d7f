-- order/retried-back
SELECT EXISTS (SELECT 1 FROM "outbox_dead_letters" WHERE source = ?1 AND retried_event_id = ?2
				AND julianday(retried_at) > julianday('now') - ?3 / 86400.0)
			AND NOT EXISTS (SELECT 1 FROM "outbox_dead_letters" WHERE source = ?1 AND event_id = ?2)
