-- poll/members-live
SELECT COUNT(*) FROM `outbox_events_relay_members` WHERE `until` > UTC_TIMESTAMP(6)
