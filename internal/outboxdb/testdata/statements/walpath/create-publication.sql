-- walpath/create-publication
CREATE PUBLICATION "outbox_events_wal" FOR TABLE "outbox_events" WITH (publish = 'insert')
