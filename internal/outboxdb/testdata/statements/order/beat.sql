-- order/beat
WITH beat AS (
			INSERT INTO "outbox_consumer_positions_members" (consumer, topic, member, until)
			VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
			ON CONFLICT (consumer, topic, member) DO UPDATE SET until = EXCLUDED.until
		), gone AS (
			DELETE FROM "outbox_consumer_positions_members" WHERE consumer = $1 AND topic = $2 AND member <> $3 AND until < now()
		)
		SELECT member FROM "outbox_consumer_positions_members" WHERE consumer = $1 AND topic = $2 AND member <> $3 AND until >= now()
