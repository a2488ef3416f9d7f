-- poll/members-create
CREATE TABLE IF NOT EXISTS `outbox_events_relay_members` (
		holder VARCHAR(255) PRIMARY KEY, `until` DATETIME(6) NOT NULL)
