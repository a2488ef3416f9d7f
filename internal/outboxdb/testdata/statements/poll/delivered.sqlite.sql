-- poll/delivered
UPDATE "outbox_events" SET delivered_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id IN (SELECT value FROM json_each(?1))
