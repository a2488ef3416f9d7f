-- metrics/held-counts
SELECT consumer, COUNT(*) FROM (SELECT consumer FROM `outbox_consumer_positions` WHERE held_seq IS NOT NULL LIMIT ?1) h GROUP BY consumer
