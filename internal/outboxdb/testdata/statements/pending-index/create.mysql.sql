-- pending-index/create
CREATE INDEX `outbox_events_undelivered` ON `outbox_events` (delivered_at, id) ALGORITHM=INPLACE LOCK=NONE
