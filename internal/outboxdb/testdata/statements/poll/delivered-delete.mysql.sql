-- poll/delivered-delete
DELETE o FROM `outbox_events` o JOIN (SELECT j.id FROM JSON_TABLE(?1, '$[*]' COLUMNS (id BIGINT PATH '$')) j) d ON o.id = d.id
