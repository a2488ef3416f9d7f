-- letters/ids
SELECT id FROM `outbox_dead_letters` WHERE TRUE ORDER BY id
