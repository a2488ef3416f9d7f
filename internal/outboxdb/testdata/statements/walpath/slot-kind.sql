-- walpath/slot-kind
SELECT coalesce(plugin, ''), coalesce(database, '') FROM pg_replication_slots
	WHERE slot_name = $1
