-- claim-parts-blocked-late: the claim of table outbox_events, 16 partitions.
-- $1: after
-- $2: limit
-- $3: parts
-- $4: blocked_types
-- $5: blocked_ids
-- $6: late_listed
-- $7: late_from
-- $8: budget
-- $9: force_first_row
SELECT * FROM (
  SELECT 0::bigint, NULL::uuid, '', 0, '', '', '', NULL::text, NULL::text, now(), 0, NULL::bigint, NULL::bigint,
    0, 0::bigint, 0::bigint, true,
    pg_snapshot_xmax(pg_current_snapshot())::text || ':' ||
      array_to_string(ARRAY(SELECT pg_snapshot_xip(pg_current_snapshot())), ',')
  UNION ALL
  SELECT w.id, w.event_id, w.event_name, w.event_version, w.topic, w.aggregate_type, w.aggregate_id,
    CASE WHEN w.kept THEN w.payload END, CASE WHEN w.kept THEN w.headers END, w.created_at, w.attempts,
    w.readable_from, w.aggregate_seq, w.part, w.wait_ms, w.size, w.kept, NULL
  FROM (
    SELECT v.*, v.running <= $8 OR v.n = 1 AND $9 AS kept
    FROM (
      SELECT u.*, sum(u.size) OVER (ORDER BY u.id) AS running, row_number() OVER (ORDER BY u.id) AS n
      FROM (
        SELECT t.*, coalesce(octet_length(t.payload), 0) + coalesce(octet_length(t.headers), 0) AS size
        FROM (
          (
            SELECT o.id, o.event_id, o.event_name, o.event_version, o.topic,
              o.aggregate_type, o.aggregate_id, o.payload::text AS payload, o.headers::text AS headers, o.created_at,
              o.attempts, o.readable_from, o.aggregate_seq, abs(hashtext(o.aggregate_type || ':' || o.aggregate_id) % 16)::int AS part,
              greatest(ceil(extract(epoch FROM o.available_at - now()) * 1000), 0)::bigint AS wait_ms
            FROM "outbox_events" o
            WHERE o.delivered_at IS NULL
              AND abs(hashtext(o.aggregate_type || ':' || o.aggregate_id) % 16)::int = ANY($3)
              AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT * FROM unnest($4::text[], $5::text[]))
              AND o.id > $1
            ORDER BY o.id LIMIT $2
          )
          UNION ALL
          (
            SELECT o.id, o.event_id, o.event_name, o.event_version, o.topic,
              o.aggregate_type, o.aggregate_id, o.payload::text AS payload, o.headers::text AS headers, o.created_at,
              o.attempts, o.readable_from, o.aggregate_seq, abs(hashtext(o.aggregate_type || ':' || o.aggregate_id) % 16)::int AS part,
              greatest(ceil(extract(epoch FROM o.available_at - now()) * 1000), 0)::bigint AS wait_ms
            FROM (
              SELECT * FROM "outbox_events" o
              WHERE o.transaction_id >= $7::text::xid8 AND o.transaction_id < pg_snapshot_xmax(pg_current_snapshot())
                AND o.id <= $1
              UNION ALL
              SELECT l.* FROM unnest($6::text[]::xid8[]) x(xid) CROSS JOIN LATERAL (
                SELECT * FROM "outbox_events" o
                WHERE o.transaction_id >= x.xid AND o.transaction_id <= x.xid AND o.id <= $1
                OFFSET 0) l
              WHERE x.xid < $7::text::xid8
              OFFSET 0) o
            WHERE o.delivered_at IS NULL
              AND abs(hashtext(o.aggregate_type || ':' || o.aggregate_id) % 16)::int = ANY($3)
              AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT * FROM unnest($4::text[], $5::text[]))
          )
        ) t
        ORDER BY t.id LIMIT $2
      ) u
    ) v
  ) w
  WHERE w.running - w.size <= $8
) c
ORDER BY 1
