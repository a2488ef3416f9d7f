-- compatpath/ack-delivered
WITH delivered AS (UPDATE "outbox_events" SET delivered_at = now() WHERE id = ANY($3) AND delivered_at IS NULL) /* the offsets adapter's ack query */
