-- backlog/open-letters-unsettled
SELECT
		(SELECT count(*) FROM (SELECT 1 FROM `outbox_dead_letters` WHERE source = 'relay' LIMIT ?1) r),
		(SELECT count(*) FROM (SELECT 1 FROM `outbox_dead_letters` WHERE source <> 'relay' LIMIT ?1) c)
