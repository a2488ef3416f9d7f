-- poll/member-leave
DELETE FROM `outbox_events_relay_members` WHERE holder = ?1 OR `until` < UTC_TIMESTAMP(6) - INTERVAL 1 DAY
