-- fastpath/holders
SELECT p.relay, count(*), max(p.until), EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid::bigint = ((hashtextextended('entoutbox live outbox_events ' || p.relay, 0)) >> 32) & 4294967295 AND l.objid::bigint = (hashtextextended('entoutbox live outbox_events ' || p.relay, 0)) & 4294967295)
	FROM "outbox_events_partitions" p WHERE p.topic = $1 AND p.relay NOT IN ('', $2) GROUP BY p.relay ORDER BY p.relay
