-- console/delivery-rate-sampled
SELECT floor(extract(epoch FROM (now() - o.delivered_at)) / $4)::int AS b, count(*)
		FROM generate_series($1::bigint, $2::bigint, $3::bigint) AS s(id)
		CROSS JOIN LATERAL (SELECT delivered_at FROM "outbox_events" WHERE id = s.id LIMIT 1) o
		WHERE o.delivered_at > now() - make_interval(secs => $5)
		GROUP BY 1
