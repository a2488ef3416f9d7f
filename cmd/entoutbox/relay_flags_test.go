package main

import (
	"database/sql"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/relay"
)

// A flag given for a read path that does not use it is refused, naming the
// flag (or the environment variable it came from) and the path, before
// anything is opened; the flags' defaults do not count as given.
func TestRelayRefusesAFlagOfAnotherPath(t *testing.T) {
	_, err := run(t, nil, "relay", "--broker", "mem://", "--path", "wal", "--lease", "5s")
	require.EqualError(t, err, "--lease applies to the fast path only; this relay runs the wal path")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--path", "compatible", "--concurrency", "8")
	require.EqualError(t, err, "--concurrency applies to the fast, wal and poll paths only; this relay runs the compatible path")
	_, err = run(t, map[string]string{"ENTOUTBOX_CONSUMER_GROUP": "billing"}, "relay", "--broker", "mem://")
	require.EqualError(t, err, "ENTOUTBOX_CONSUMER_GROUP (--consumer-group) applies to the compatible path only; this relay runs the fast path")
	_, err = run(t, nil, "relay", "--broker", "mem://", "--path", "slow")
	require.EqualError(t, err, `--path "slow": want fast, compatible, wal or poll`)

	for _, path := range []relay.Path{relay.PathFast, relay.PathCompatible, relay.PathWAL} {
		o, flags := parseRelayFlags(t, "--path", string(path))
		require.NoError(t, o.check(flags), "the defaults of %s", path)
		cfg := o.config()
		cfg.DB, cfg.Publisher = &sql.DB{}, gochannel.NewGoChannel(gochannel.Config{}, nil)
		require.NoError(t, cfg.Validate(), "the defaults of %s", path)
	}
}

// On a MySQL URL the relay polls by default and takes the compatible path
// when asked; the PostgreSQL paths, and a consumer group of the compatible
// path's own (its relays share one position there), are refused before
// anything is opened.
func TestRelayOnMySQLTakesThePollAndCompatiblePaths(t *testing.T) {
	const url = "mysql://root@127.0.0.1:3306/app"
	o, flags := parseRelayFlags(t, "--database-url", url)
	require.NoError(t, o.check(flags))
	require.Equal(t, relay.PathPoll, o.config().Path)
	o, flags = parseRelayFlags(t, "--database-url", url, "--path", "compatible")
	require.NoError(t, o.check(flags))
	require.Equal(t, relay.PathCompatible, o.config().Path)
	o, flags = parseRelayFlags(t, "--database-url", url, "--path", "compatible", "--consumer-group", relay.DefaultConsumerGroup)
	require.NoError(t, o.check(flags))

	for _, path := range []relay.Path{relay.PathFast, relay.PathWAL} {
		o, flags := parseRelayFlags(t, "--database-url", url, "--path", string(path))
		require.EqualError(t, o.check(flags), "--path "+string(path)+" needs PostgreSQL; on MySQL/MariaDB the relay runs "+
			"the poll path (the default there) or the compatible path")
	}
	o, flags = parseRelayFlags(t, "--database-url", url, "--path", "compatible", "--consumer-group", "billing")
	require.EqualError(t, o.check(flags), `--consumer-group "billing": on MySQL/MariaDB the compatible path's relays all read `+
		"the rows not yet delivered, one position for the outbox; leave it unset")
}

// relaySettingSamples is a value for each flag of a relay setting. A flag
// added without one fails the test below, which then checks its paths.
var relaySettingSamples = map[string]string{
	"topic-prefix": "staging_", "dead-letter-table": "letters", "scheduled-table": "later", "sequence-table": "seqs", "close-timeout": "5s", "batch-size": "10",
	"retry-interval": "1s", "poll-interval": "1s", "concurrency": "3", "max-bytes-in-flight": "1MiB", "max-attempts": "3",
	"lease": "5s", "partitions": "8", "poll-only": "true", "delete-delivered": "true", "delivered-log": "true", "relay-id": "r1",
	"listen-database-url": "postgres://127.0.0.1/app", "consumer-group": "billing", "slot": "orders_wal",
	"publication": "orders_wal", "replication-url": "postgres://127.0.0.1/app",
}

// The flags of the command that are not relay settings.
var relayCommandFlags = []string{"database-url", "table", "broker", "path", "log-level", "log-format", "metrics-addr", "pprof",
	"cloudevents-source", "cloudevents-dataschema-base", "cloudevents-prefix", "max-connections", "databases-file", "fleet-listen",
	"metrics-tenants", "fleet-idle-after", "fleet-turn", "fleet-database-url", "fleet-member-id", "fleet-member-timeout",
	"registry-database-url", "registry-table", "fleet-backlog-interval", "fleet-probe-concurrency"}

// What the command refuses, its help and the library's Config.Validate
// agree: each setting flag given for each path is refused by both exactly
// when the help says the flag is not for that path.
func TestRelayFlagsPathsAgreeWithValidate(t *testing.T) {
	_, flags := parseRelayFlags(t)
	flags.VisitAll(func(f *pflag.Flag) {
		if slices.Contains(relayCommandFlags, f.Name) {
			return
		}
		sample, ok := relaySettingSamples[f.Name]
		require.True(t, ok, "--%s: no sample value; add one", f.Name)
		paths, only := pathFlags[f.Name]
		if only {
			require.Contains(t, f.Usage, pathsOnly(paths), "--%s", f.Name)
		} else {
			require.NotContains(t, f.Usage, " only)", "--%s", f.Name)
		}
		for _, path := range []relay.Path{relay.PathFast, relay.PathCompatible, relay.PathWAL} {
			applies := !only || slices.Contains(paths, path)
			o, given := parseRelayFlags(t, "--path", string(path), "--"+f.Name, sample)
			err := o.check(given)
			if applies {
				require.NoError(t, err, "--%s on the %s path", f.Name, path)
			} else {
				require.EqualError(t, err, "--"+f.Name+" applies to the "+pathsOnly(paths)+"; this relay runs the "+string(path)+" path")
			}

			cfg := o.config()
			cfg.DB, cfg.Publisher = &sql.DB{}, gochannel.NewGoChannel(gochannel.Config{}, nil)
			if o.listenDatabaseURL != "" {
				cfg.Fast.ListenDB = &sql.DB{} // what run opens
			}
			err = cfg.Validate()
			var wrong *relay.WrongPathError
			require.Equal(t, !applies, errors.As(err, &wrong), "--%s on the %s path: %v", f.Name, path, err)
			if !applies {
				require.Equal(t, paths, wrong.Paths, "--%s", f.Name)
			}
		}
	})
}

// Each flag lands in its own field of relay.Config, and nothing else does:
// the fields not given stay zero, for the relay's defaults of its path.
func TestRelayFlagsMapToConfig(t *testing.T) {
	common := []string{"--table", "orders_outbox", "--dead-letter-table", "orders_letters", "--topic-prefix", "staging_",
		"--close-timeout", "5s", "--batch-size", "10", "--retry-interval", "2s", "--scheduled-table", "orders_later",
		"--sequence-table", "orders_seqs"}
	base := relay.Config{Table: "orders_outbox", DeadLetterTable: "orders_letters", TopicPrefix: "staging_",
		ScheduledTable: "orders_later", SequenceTable: "orders_seqs",
		CloseTimeout: 5 * time.Second, BatchSize: 10, RetryInterval: 2 * time.Second}
	for _, tc := range []struct {
		args []string
		want func(c *relay.Config)
	}{
		{[]string{"--path", "fast", "--poll-interval", "3s", "--concurrency", "4", "--max-bytes-in-flight", "1MiB", "--max-attempts", "5",
			"--lease", "6s", "--partitions", "7", "--poll-only", "--delete-delivered", "--relay-id", "r1"}, func(c *relay.Config) {
			c.Path, c.PollInterval, c.Concurrency, c.MaxBytesInFlight, c.MaxAttempts = relay.PathFast, 3*time.Second, 4, 1<<20, 5
			c.Fast = relay.FastConfig{Lease: 6 * time.Second, Partitions: 7, PollOnly: true, Delete: true, RelayID: "r1"}
		}},
		{[]string{"--path", "compatible", "--poll-interval", "3s", "--consumer-group", "billing"}, func(c *relay.Config) {
			c.Path, c.PollInterval, c.Compatible.ConsumerGroup = relay.PathCompatible, 3*time.Second, "billing"
		}},
		{[]string{"--path", "wal", "--concurrency", "4", "--max-bytes-in-flight", "1MiB", "--max-attempts", "5",
			"--slot", "orders_wal", "--publication", "orders_pub", "--replication-url", "postgres://127.0.0.1/app"}, func(c *relay.Config) {
			c.Path, c.Concurrency, c.MaxBytesInFlight, c.MaxAttempts = relay.PathWAL, 4, 1<<20, 5
			c.WAL = relay.WALConfig{Slot: "orders_wal", Publication: "orders_pub", ReplicationURL: "postgres://127.0.0.1/app"}
		}},
	} {
		o, flags := parseRelayFlags(t, append(common, tc.args...)...)
		require.NoError(t, o.check(flags))
		want := base
		tc.want(&want)
		require.Equal(t, want, o.config(), "%v", tc.args)
	}
}

// The help says which paths each flag is for: the flags the fast and wal
// paths share do not say "fast path".
func TestRelayHelpSaysWhichPaths(t *testing.T) {
	out, err := run(t, nil, "relay", "--help")
	require.NoError(t, err)
	usage := func(flag string) string {
		m := regexp.MustCompile(`(?m)^\s+--` + flag + `\b.*$`).FindString(out)
		require.NotEmpty(t, m, "--%s in:\n%s", flag, out)
		return m
	}
	for _, flag := range []string{"concurrency", "max-attempts", "max-bytes-in-flight"} {
		require.NotContains(t, usage(flag), "(fast path")
		require.NotContains(t, usage(flag), "; fast path")
	}
	require.Contains(t, usage("max-bytes-in-flight"), "fast and wal paths only")
	for _, flag := range []string{"concurrency", "max-attempts"} {
		require.Contains(t, usage(flag), "fast, wal and poll paths only")
	}
	require.Contains(t, usage("poll-interval"), "fast, compatible and poll paths only")
	for _, flag := range []string{"lease", "partitions", "poll-only", "delete-delivered", "delivered-log", "relay-id", "listen-database-url"} {
		require.Contains(t, usage(flag), "fast path only)", "--%s", flag)
	}
	require.Contains(t, usage("consumer-group"), "compatible path only)")
	for _, flag := range []string{"slot", "publication", "replication-url"} {
		require.Contains(t, usage(flag), "wal path only)", "--%s", flag)
	}
	for _, flag := range []string{"batch-size", "retry-interval", "topic-prefix", "close-timeout"} {
		require.NotContains(t, usage(flag), "only", "--%s", flag)
	}
	require.True(t, strings.Contains(usage("lease"), "(default 30s; fast path only)"), usage("lease"))
}

// parseRelayFlags parses args, after --broker mem://, as the relay
// command's flags.
func parseRelayFlags(t *testing.T, args ...string) (*relayOptions, *pflag.FlagSet) {
	t.Helper()
	o := &relayOptions{}
	flags := pflag.NewFlagSet("relay", pflag.ContinueOnError)
	flags.StringVar(&o.databaseURL, "database-url", "", "")
	flags.StringVar(&o.table, "table", "", "")
	o.addFlags(flags)
	require.NoError(t, flags.Parse(append([]string{"--broker", "mem://"}, args...)))
	return o, flags
}
