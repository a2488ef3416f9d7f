-- console/delivery-rate
SELECT CAST(FLOOR(TIMESTAMPDIFF(MICROSECOND, delivered_at, UTC_TIMESTAMP(6)) / 1000000 / ?4) AS SIGNED) AS b, COUNT(*)
		FROM `outbox_events` WHERE id BETWEEN ?1 AND ?2 AND ?3 = 1
			AND delivered_at > UTC_TIMESTAMP(6) - INTERVAL ?5 SECOND
		GROUP BY b
