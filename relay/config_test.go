package relay_test

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/mysqldb"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/sqlitedb"
)

// Every setting only some read paths use is refused, naming it and the
// relay's path, when given for another path; accepted on its own paths.
// Validate reads no database: a DB that is never opened will do.
func TestValidateRefusesASettingOfAnotherPath(t *testing.T) {
	t.Parallel()
	fast, wal, compatible, poll := relay.PathFast, relay.PathWAL, relay.PathCompatible, relay.PathPoll
	all := []relay.Path{fast, wal, compatible} // PostgreSQL's (poll is SQLite's: TestPollPathIsSQLites)
	for _, s := range []struct {
		name  string
		set   func(c *relay.Config)
		paths []relay.Path
	}{
		{"BatchSize", func(c *relay.Config) { c.BatchSize = 10 }, all},
		{"RetryInterval", func(c *relay.Config) { c.RetryInterval = time.Second }, all},
		{"TopicPrefix", func(c *relay.Config) { c.TopicPrefix = "staging_" }, all},
		{"CloseTimeout", func(c *relay.Config) { c.CloseTimeout = time.Second }, all},
		{"PollInterval", func(c *relay.Config) { c.PollInterval = time.Second }, []relay.Path{fast, compatible, poll}},
		{"Concurrency", func(c *relay.Config) { c.Concurrency = 3 }, []relay.Path{fast, wal, poll}},
		{"MaxBytesInFlight", func(c *relay.Config) { c.MaxBytesInFlight = 1 << 20 }, []relay.Path{fast, wal}},
		{"MaxAttempts", func(c *relay.Config) { c.MaxAttempts = 3 }, []relay.Path{fast, wal, poll}},
		{"MaxBackoff", func(c *relay.Config) { c.MaxBackoff = time.Minute }, []relay.Path{fast, wal, poll}},
		{"Fast.RelayID", func(c *relay.Config) { c.Fast.RelayID = "r1" }, []relay.Path{fast}},
		{"Fast.Lease", func(c *relay.Config) { c.Fast.Lease = 5 * time.Second }, []relay.Path{fast}},
		{"Fast.Partitions", func(c *relay.Config) { c.Fast.Partitions = 8 }, []relay.Path{fast}},
		{"Fast.PollOnly", func(c *relay.Config) { c.Fast.PollOnly = true }, []relay.Path{fast}},
		{"Fast.ListenDB", func(c *relay.Config) { c.Fast.ListenDB = &sql.DB{} }, []relay.Path{fast}},
		{"Fast.Delete", func(c *relay.Config) { c.Fast.Delete = true }, []relay.Path{fast}},
		{"Compatible.ConsumerGroup", func(c *relay.Config) { c.Compatible.ConsumerGroup = "g" }, []relay.Path{compatible}},
		{"WAL.Slot", func(c *relay.Config) { c.WAL.Slot = "s" }, []relay.Path{wal}},
		{"WAL.Publication", func(c *relay.Config) { c.WAL.Publication = "p" }, []relay.Path{wal}},
		{"WAL.ReplicationURL", func(c *relay.Config) { c.WAL.ReplicationURL = "postgres://h/db" }, []relay.Path{wal}},
		{"WAL.StatusInterval", func(c *relay.Config) { c.WAL.StatusInterval = time.Second }, []relay.Path{wal}},
		{"WAL.StandbyRetry", func(c *relay.Config) { c.WAL.StandbyRetry = time.Second }, []relay.Path{wal}},
		{"WAL.ProgressInterval", func(c *relay.Config) { c.WAL.ProgressInterval = time.Second }, []relay.Path{wal}},
	} {
		for _, path := range all {
			t.Run(s.name+"/"+string(path), func(t *testing.T) {
				cfg := relay.Config{DB: &sql.DB{}, Publisher: gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{}), Path: path}
				s.set(&cfg)
				err := cfg.Validate()
				if slices.Contains(s.paths, path) {
					require.NoError(t, err)
					return
				}
				var wrong *relay.WrongPathError
				require.True(t, errors.As(err, &wrong), "%v", err)
				require.Equal(t, relay.WrongPathError{Setting: s.name, Paths: s.paths, Path: path}, *wrong)
				require.Contains(t, err.Error(), fmt.Sprintf("Config.%s applies to", s.name))
				require.Contains(t, err.Error(), fmt.Sprintf("this relay runs the %s path", path))
			})
		}
	}
	// The default path is the fast one.
	err := relay.Config{DB: &sql.DB{}, Publisher: gochannel.NewGoChannel(gochannel.Config{}, nil),
		WAL: relay.WALConfig{Slot: "s"}}.Validate()
	require.EqualError(t, err, "relay: Config.WAL.Slot applies to the wal path only; this relay runs the fast path")
	err = relay.Config{DB: &sql.DB{}, Publisher: gochannel.NewGoChannel(gochannel.Config{}, nil), Path: compatible,
		Concurrency: 8}.Validate()
	require.EqualError(t, err, "relay: Config.Concurrency applies to the fast, wal and poll paths only; this relay runs the compatible path")
}

// The settings the paths share are checked once, under their own names.
func TestValidateNamesTheSharedSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  relay.Config
		want string
	}{
		{relay.Config{BatchSize: -1}, "relay: Config.BatchSize must not be negative, not -1"},
		{relay.Config{Concurrency: -1}, "relay: Config.Concurrency must not be negative, not -1"},
		{relay.Config{MaxAttempts: -1}, "relay: Config.MaxAttempts must not be negative, not -1"},
		{relay.Config{MaxBytesInFlight: -1}, "relay: Config.MaxBytesInFlight must not be negative, not -1"},
		{relay.Config{PollInterval: -time.Second}, "relay: Config.PollInterval must not be negative, not -1s"},
		{relay.Config{RetryInterval: time.Second, MaxBackoff: time.Millisecond},
			"relay: Config.MaxBackoff (1ms) must not be below RetryInterval (1s)"},
		{relay.Config{Fast: relay.FastConfig{Lease: 500 * time.Millisecond}}, "relay: Config.Fast.Lease must be at least 1s, not 500ms"},
		{relay.Config{Fast: relay.FastConfig{Partitions: 5000}}, "relay: Config.Fast.Partitions must be between 1 and 4096, not 5000"},
	} {
		tc.cfg.DB, tc.cfg.Publisher = &sql.DB{}, gochannel.NewGoChannel(gochannel.Config{}, nil)
		require.EqualError(t, tc.cfg.Validate(), tc.want)
	}
}

// Each database takes the paths it runs and refuses the others, naming
// why; on MySQL the compatible path's relays share one position, so a
// consumer group of their own is refused. Validate opens no connection.
func TestValidateTakesThePathsOfItsDatabase(t *testing.T) {
	t.Parallel()
	mysqlDB, err := mysqldb.Open("mysql://root@127.0.0.1:3306/app")
	require.NoError(t, err)
	defer mysqlDB.Close()
	sqliteDB, err := sqlitedb.Open("sqlite:" + filepath.Join(t.TempDir(), "app.db"))
	require.NoError(t, err)
	defer sqliteDB.Close()
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	fast, wal, compatible, poll := relay.PathFast, relay.PathWAL, relay.PathCompatible, relay.PathPoll
	for _, db := range []struct {
		name string
		db   *sql.DB
		runs []relay.Path
	}{
		{"PostgreSQL", &sql.DB{}, []relay.Path{fast, compatible, wal}},
		{"MySQL", mysqlDB, []relay.Path{poll, compatible}},
		{"SQLite", sqliteDB, []relay.Path{poll}},
	} {
		for _, path := range []relay.Path{fast, compatible, wal, poll} {
			err := relay.Config{DB: db.db, Publisher: pub, Path: path}.Validate()
			if slices.Contains(db.runs, path) {
				require.NoError(t, err, "%s on %s", path, db.name)
				continue
			}
			require.ErrorContains(t, err, fmt.Sprintf("relay: Config.Path %q", path), "%s on %s", path, db.name)
		}
	}
	err = relay.Config{DB: mysqlDB, Publisher: pub, Path: fast}.Validate()
	require.EqualError(t, err, `relay: Config.Path "fast" needs PostgreSQL (LISTEN, logical replication); on MySQL use "poll", the default there, or "compatible"`)
	for group, refused := range map[string]bool{"": false, relay.DefaultConsumerGroup: false, "billing": true} {
		err := relay.Config{DB: mysqlDB, Publisher: pub, Path: compatible, Compatible: relay.CompatibleConfig{ConsumerGroup: group}}.Validate()
		if !refused {
			require.NoError(t, err, "group %q", group)
			continue
		}
		require.EqualError(t, err, `relay: Config.Compatible.ConsumerGroup "billing": on MySQL the compatible path's relays read `+
			"the rows not yet delivered (delivered_at), not an offset of their group, so the relays of an outbox form one group; leave it empty")
		err = relay.Config{DB: &sql.DB{}, Publisher: pub, Path: compatible, Compatible: relay.CompatibleConfig{ConsumerGroup: group}}.Validate()
		require.NoError(t, err, "PostgreSQL's relays have a position per group")
	}
}
