-- console/delivery-rate
SELECT floor(extract(epoch FROM (now() - delivered_at)) / $4)::int AS b, count(*)
		FROM "outbox_events" WHERE id BETWEEN $1 AND $2 AND $3::bigint = 1
			AND delivered_at > now() - make_interval(secs => $5)
		GROUP BY 1
