-- topics/recent
SELECT DISTINCT topic FROM (SELECT topic FROM `outbox_events` ORDER BY id DESC LIMIT ?1) recent ORDER BY topic
