-- relays/shares
SELECT holder, '', COUNT(*), MAX(`until`), MAX(`until`) < UTC_TIMESTAMP(6), FALSE, FALSE
		FROM `outbox_events_relay_lease` WHERE holder <> '' GROUP BY holder ORDER BY holder LIMIT ?1
