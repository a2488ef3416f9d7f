-- walpath/slots
SELECT p.slot, s.slot_name IS NOT NULL, coalesce(s.active, false),
		coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
		coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint,
		coalesce(s.wal_status, '')
		FROM "outbox_events_wal_progress" p LEFT JOIN pg_replication_slots s ON s.slot_name = p.slot
		ORDER BY p.slot LIMIT $1
