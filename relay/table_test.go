package relay_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// tablesOf lists the tables of the test's schema.
func tablesOf(t *testing.T, b *emitBundle) []string {
	t.Helper()
	rows, err := b.db.DB.Query(`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		out = append(out, name)
	}
	require.NoError(t, rows.Err())
	return out
}

// A --table that names no outbox table, or one not migrated to this
// version, is refused at start, on either path, with an error naming it,
// and nothing is created after its name.
func TestRelayRefusesMissingTable(t *testing.T) {
	t.Parallel()
	forPaths(t, func(t *testing.T, p *onPath) {
		b := p.emitBundle
		_, err := b.db.DB.Exec(`CREATE TABLE not_outbox (id bigint, payload jsonb);
			CREATE TABLE unmigrated (LIKE outbox_events INCLUDING ALL); ALTER TABLE unmigrated DROP COLUMN readable_from;
			CREATE TABLE old_letters (LIKE outbox_dead_letters INCLUDING ALL); ALTER TABLE old_letters DROP COLUMN aggregate_seq`)
		require.NoError(t, err)
		before := tablesOf(t, b)
		pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		for table, want := range map[string]string{
			"nope":       `relay: table "nope" does not exist (run the ent migration first: client.Schema.Create)`,
			"not_outbox": `relay: table "not_outbox" is not an outbox table: it lacks the columns event_id, event_name`,
			// A table of an earlier version, not migrated since.
			"unmigrated": `relay: table "unmigrated" is not an outbox table: it lacks the columns readable_from (run the ent migration first`,
		} {
			r, err := relay.New(p.config(relay.Config{Publisher: pub, Table: table}))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			err = r.Run(ctx)
			cancel()
			require.Error(t, err, "table %s", table)
			require.True(t, strings.HasPrefix(err.Error(), want), "table %s: %v", table, err)
		}
		// A dead-letter table of an earlier version: a dead letter keeps
		// its event's aggregate_seq.
		r, err := relay.New(p.config(relay.Config{Publisher: pub, DeadLetterTable: "old_letters"}))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		err = r.Run(ctx)
		cancel()
		require.ErrorContains(t, err, `relay: dead-letter table "old_letters" lacks the columns aggregate_seq (run the ent migration first`)
		require.Equal(t, before, tablesOf(t, b), "tables created after a refused name")
	})
}

// The Subscriber refuses it too, before creating its partition tables.
func TestSubscriberRefusesMissingTable(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	before := tablesOf(t, b)
	sub, err := relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{Table: "nope", Lease: 2 * time.Second})
	require.NoError(t, err)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, err = sub.Subscribe(ctx, relay.AllTopics)
	require.EqualError(t, err, `relay: table "nope" does not exist (run the ent migration first: client.Schema.Create)`)
	require.Equal(t, before, tablesOf(t, b))
}

// A name so long that the relay's own tables named after it would be cut
// at PostgreSQL's 63 bytes (<table>_partitions onto the table itself) is
// refused by New and NewSubscriber.
func TestRelayRefusesTooLongTableName(t *testing.T) {
	t.Parallel()
	b := setupEmit(t)
	long := strings.Repeat("o", 63)
	_, err := b.db.DB.Exec(`CREATE TABLE ` + long + ` (LIKE outbox_events INCLUDING ALL)`)
	require.NoError(t, err)
	before := tablesOf(t, b)
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	for _, name := range []string{long, strings.Repeat("o", 50)} {
		want := `relay: table name "` + name + `" is ` + strconv.Itoa(len(name)) + ` bytes, at most 49`
		_, err = relay.New(relay.Config{DB: b.db.DB, Publisher: pub, Table: name})
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), want), err.Error())
		_, err = relay.NewSubscriber(b.db.DB, relay.SubscriberConfig{Table: name})
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), want), err.Error())
	}
	_, err = relay.New(relay.Config{DB: b.db.DB, Publisher: pub, Table: strings.Repeat("o", 49)})
	require.NoError(t, err, "49 bytes fit")
	require.Equal(t, before, tablesOf(t, b))
}
