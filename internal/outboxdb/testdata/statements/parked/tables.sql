-- parked/tables
SELECT to_regclass('"outbox_events"') IS NOT NULL, to_regclass('"outbox_scheduled_events"') IS NOT NULL
