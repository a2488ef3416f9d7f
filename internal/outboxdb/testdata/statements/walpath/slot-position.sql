-- walpath/slot-position
SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1
