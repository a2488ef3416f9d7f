-- relays/shares
SELECT p.relay, p.topic, count(*), max(p.until), max(p.until) < now(),
		coalesce(bool_or(m.live_lock), false), EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid::bigint = ((hashtextextended('entoutbox live outbox_events ' || p.relay, 0)) >> 32) & 4294967295 AND l.objid::bigint = (hashtextextended('entoutbox live outbox_events ' || p.relay, 0)) & 4294967295)
		FROM "outbox_events_partitions" p LEFT JOIN "outbox_events_relays" m ON m.topic = p.topic AND m.relay = p.relay
		WHERE p.relay <> '' GROUP BY p.relay, p.topic ORDER BY p.topic, p.relay LIMIT $1
