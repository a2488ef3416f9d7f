-- order/leave
DELETE FROM "outbox_consumer_positions_members" WHERE consumer = $1 AND topic = $2 AND member = $3
