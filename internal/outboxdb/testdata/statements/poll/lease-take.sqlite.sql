-- poll/lease-take
INSERT INTO "outbox_events_relay_lease" (id, holder, until)
		VALUES (1, ?1, strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', ?2 / 1000.0)))
		ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, until = excluded.until
		WHERE "outbox_events_relay_lease".holder = excluded.holder OR julianday("outbox_events_relay_lease".until) < julianday('now')
