-- fastpath/log-compact
WITH st AS MATERIALIZED (SELECT upto, snap FROM "outbox_events_delivered_to" FOR UPDATE),
-- A row below the floor that its snapshot did not see, still pending: the
-- floor stays until it is delivered (moving it would make the rows between
-- it and the new floor pending again). Only the snapshot's transactions in
-- progress can have such rows: one begun after it took its ids above the
-- floor.
-- (Fenced by OFFSET 0 from the LIMIT: the planner would walk the primary
-- key under the floor, every retained row, hoping for an early match.)
late AS (
	SELECT 1 FROM (SELECT o.id FROM "outbox_events" o
	WHERE o.transaction_id >= pg_snapshot_xmin((SELECT snap FROM st)) AND o.transaction_id < pg_snapshot_xmax((SELECT snap FROM st))
	  AND o.id <= (SELECT upto FROM st) AND NOT pg_visible_in_snapshot(o.transaction_id, (SELECT snap FROM st)) AND o.delivered_at IS NULL AND NOT EXISTS (SELECT 1 FROM "outbox_events_delivered" dl WHERE dl.id = o.id)
	OFFSET 0) l
	LIMIT 1),
first AS (
	SELECT o.id FROM "outbox_events" o WHERE o.id > (SELECT upto FROM st) AND o.delivered_at IS NULL AND NOT EXISTS (SELECT 1 FROM "outbox_events_delivered" dl WHERE dl.id = o.id) ORDER BY o.id LIMIT 1),
-- Once: a subquery in the UPDATE's FROM would be pulled up and read first
-- for each of its uses.
next AS MATERIALIZED (
	SELECT coalesce((SELECT id - 1 FROM first), (SELECT max(id) FROM "outbox_events"), 0) AS upto
	WHERE NOT EXISTS (SELECT 1 FROM late)),
moved AS (
	UPDATE "outbox_events_delivered_to" SET upto = n.upto, snap = pg_current_snapshot()
	FROM next n WHERE n.upto >= (SELECT upto FROM st)
	RETURNING "outbox_events_delivered_to".upto)
-- Every entry under the new floor is covered by it: an entry this
-- statement sees was written after its row was claimed, so the row's
-- transaction had committed before this statement's snapshot.
DELETE FROM "outbox_events_delivered" dl WHERE dl.id <= (SELECT upto FROM moved)
