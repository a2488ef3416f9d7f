-- console/aggregate-types
WITH RECURSIVE types AS (
			(SELECT aggregate_type FROM "outbox_events" ORDER BY aggregate_type LIMIT 1)
			UNION ALL
			SELECT (SELECT o.aggregate_type FROM "outbox_events" o WHERE o.aggregate_type > types.aggregate_type ORDER BY o.aggregate_type LIMIT 1)
			FROM types WHERE types.aggregate_type IS NOT NULL
		) SELECT aggregate_type FROM types WHERE aggregate_type IS NOT NULL
