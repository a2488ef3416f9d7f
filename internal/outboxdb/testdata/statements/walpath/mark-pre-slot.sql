-- walpath/mark-pre-slot
UPDATE "outbox_events" SET delivered_at = now() WHERE id = ANY($1) AND delivered_at IS NULL
