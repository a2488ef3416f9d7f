-- outboxtest/scheduled-due
SELECT event_id, event_name, event_version, topic, aggregate_id, deliver_at
			FROM `outbox_scheduled_events` WHERE cancelled_at IS NULL AND deliver_at <= ?1 ORDER BY id
