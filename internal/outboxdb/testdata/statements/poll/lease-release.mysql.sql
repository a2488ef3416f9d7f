-- poll/lease-release
DELETE FROM `outbox_events_relay_lease` WHERE holder = ?1
