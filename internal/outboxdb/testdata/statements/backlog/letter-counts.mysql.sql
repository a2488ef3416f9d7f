-- backlog/letter-counts
SELECT (SELECT count(*) FROM (SELECT 1 FROM `outbox_dead_letters` WHERE retried_at IS NULL AND discarded_at IS NULL LIMIT ?1) x), (SELECT count(*) FROM (SELECT 1 FROM `outbox_dead_letters` WHERE retried_at IS NOT NULL LIMIT ?1) x), (SELECT count(*) FROM (SELECT 1 FROM `outbox_dead_letters` WHERE retried_at IS NULL AND discarded_at IS NOT NULL LIMIT ?1) x)
