package console_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/console"
	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/relay"
)

// The overview lists the slot of a WAL relay that streams, as status does,
// when the slot is not named as its publication (WALConfig allows it), and
// does not say that no relay ran.
func TestOverviewListsWALSlotNamedApartFromPublication(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	pgtest.RequireLogical(t, e.db.DB)
	name := "t" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	slot, publication := name+"_slot", name+"_pub"
	t.Cleanup(func() { pgtest.DropWAL(t, e.db.DB, slot, publication) })

	pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubsub.Close() })
	r, err := relay.New(relay.Config{DB: e.db.DB, Publisher: pubsub, Path: relay.PathWAL, Logger: watermill.NopLogger{},
		RetryInterval: 50 * time.Millisecond, WAL: relay.WALConfig{Slot: slot, Publication: publication,
			StatusInterval: 200 * time.Millisecond, StandbyRetry: 200 * time.Millisecond}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(patience):
			t.Errorf("the relay did not stop within %s", patience)
		}
	})
	require.Eventually(t, func() bool {
		var active bool
		// Active while the relay creates it too: streaming once it has a
		// confirmed position.
		err := e.db.DB.QueryRow(`SELECT active AND confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots
			WHERE slot_name = $1`, slot).Scan(&active)
		if errors.Is(err, sql.ErrNoRows) {
			return false
		}
		require.NoError(t, err)
		return active
	}, patience, 20*time.Millisecond, "no relay streams slot %s", slot)

	// The relay may be between two sessions of its stream at one look (the
	// slot inactive for a moment): the page is read again until it shows
	// the slot active.
	client, active := browserClient(t), regexp.MustCompile(`<tr><td>`+slot+`</td><td><span class="ok">active</span></td>`)
	status, body := get(t, client, e.srv.URL+"/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "<td>"+slot+"</td>", "the slot the relay streams is listed")
	require.Eventually(t, func() bool {
		status, body = get(t, client, e.srv.URL+"/")
		return status == http.StatusOK && active.MatchString(body)
	}, patience, 100*time.Millisecond, "the slot the relay streams, listed and active")
	require.NotContains(t, body, "has run on this outbox", "a WAL relay ran")
}
