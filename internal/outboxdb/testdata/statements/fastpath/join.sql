-- fastpath/join
INSERT INTO "outbox_events_relays" (topic, relay, until, live_lock)
	VALUES ($1, $2, now() + $3 * interval '1 millisecond', $4)
	ON CONFLICT (topic, relay) DO UPDATE SET until = excluded.until, live_lock = excluded.live_lock
	RETURNING xmax = 0
