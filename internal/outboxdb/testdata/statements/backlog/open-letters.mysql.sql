-- backlog/open-letters
SELECT
		(SELECT count(*) FROM (SELECT 1 FROM `outbox_dead_letters` WHERE source = 'relay' AND discarded_at IS NULL AND retried_at IS NULL LIMIT ?1) r),
		(SELECT count(*) FROM (SELECT 1 FROM `outbox_dead_letters` WHERE source <> 'relay' AND discarded_at IS NULL AND retried_at IS NULL LIMIT ?1) c)
