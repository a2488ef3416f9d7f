-- fastpath/dead-members
SELECT relay FROM "outbox_events_relays" WHERE topic = $1 AND relay <> $2 AND live_lock
	AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid::bigint = ((hashtextextended('entoutbox live outbox_events ' || relay, 0)) >> 32) & 4294967295 AND l.objid::bigint = (hashtextextended('entoutbox live outbox_events ' || relay, 0)) & 4294967295)
