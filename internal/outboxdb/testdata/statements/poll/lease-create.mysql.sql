-- poll/lease-create
CREATE TABLE IF NOT EXISTS `outbox_events_relay_lease` (
		id INT PRIMARY KEY, holder VARCHAR(255) NOT NULL, `until` DATETIME(6) NOT NULL)
