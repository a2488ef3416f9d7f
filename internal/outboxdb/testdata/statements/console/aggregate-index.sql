-- console/aggregate-index
CREATE INDEX CONCURRENTLY "outbox_events_aggregate" ON "outbox_events" (aggregate_type, aggregate_id)
