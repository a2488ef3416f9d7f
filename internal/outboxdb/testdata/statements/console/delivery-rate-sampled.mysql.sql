-- console/delivery-rate-sampled
SELECT CAST(FLOOR(TIMESTAMPDIFF(MICROSECOND, o.delivered_at, UTC_TIMESTAMP(6)) / 1000000 / ?4) AS SIGNED) AS b, COUNT(*)
		FROM JSON_TABLE(CONCAT('[', REPEAT('0,', FLOOR((?2 - ?1) / ?3)), '0]'), '$[*]' COLUMNS (k FOR ORDINALITY)) s
		JOIN `outbox_events` o ON o.id = ?1 + (s.k - 1) * ?3
		WHERE o.delivered_at > UTC_TIMESTAMP(6) - INTERVAL ?5 SECOND
		GROUP BY b
