-- backlog/letter-counts-unsettled
SELECT (SELECT count(*) FROM (SELECT 1 FROM `outbox_dead_letters` LIMIT ?1) x), 0, 0
