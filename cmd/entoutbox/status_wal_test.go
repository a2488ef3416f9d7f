package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// status shows a WAL relay's slot: inactive, retaining WAL, in text and
// JSON.
func TestStatusShowsWALSlots(t *testing.T) {
	t.Parallel()
	db, _ := letterDB(t)
	pgtest.RequireLogical(t, db.DB)
	slot := "t" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") + "_wal"
	_, err := db.DB.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.DB.Exec(`SELECT pg_drop_replication_slot($1)`, slot) })
	_, err = db.DB.Exec(`CREATE TABLE outbox_events_wal_progress (slot text PRIMARY KEY, created pg_snapshot,
		delivered pg_snapshot, confirmed_lsn pg_lsn, updated_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO outbox_events_wal_progress (slot) VALUES ($1)`, slot)
	require.NoError(t, err)
	// WAL written after the slot's start: it keeps it.
	_, err = db.DB.Exec(`INSERT INTO outbox_events (event_id, event_name, event_version, topic, aggregate_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'order.paid', 2, 'orders', 'Order', g::text, '{}' FROM generate_series(1, 50) g`)
	require.NoError(t, err)

	out, err := run(t, nil, "status", "--database-url", db.URL)
	require.NoError(t, err)
	require.Contains(t, out, "wal slots:           1\n")
	require.Contains(t, out, slot+": inactive: no relay streams it, and the server keeps all WAL since its position")
	out, err = run(t, nil, "status", "--database-url", db.URL, "--json")
	require.NoError(t, err)
	var st struct {
		Pending int64 `json:"pending"`
		WAL     []struct {
			Slot          string `json:"slot"`
			Exists        bool   `json:"exists"`
			Active        bool   `json:"active"`
			RetainedBytes int64  `json:"retained_bytes"`
		} `json:"wal"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, int64(50), st.Pending, "nothing recorded as delivered: all pending")
	require.Len(t, st.WAL, 1)
	require.Equal(t, slot, st.WAL[0].Slot)
	require.True(t, st.WAL[0].Exists)
	require.False(t, st.WAL[0].Active)
	require.Positive(t, st.WAL[0].RetainedBytes)
}
