package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/entoutbox/entoutbox/internal/pgschema"
)

// Open creates a fresh schema whose name starts with "x_" + name, for code
// that has no testing.TB, such as an Example; Drop removes it.
func Open(ctx context.Context, name string) (*DB, error) {
	s, err := pgschema.Create(ctx, ServerURL(), pgschema.Name("x_", name))
	if err != nil {
		return nil, fmt.Errorf("%w on %s", err, ServerURL())
	}
	return &DB{Schema: s.Name, URL: s.URL, DB: s.DB, dropper: s}, nil
}

// Drop closes d's pool and drops its schema.
func (d *DB) Drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.dropper.Drop(ctx)
}

// SkipExamplesUnlessReachable, called from an init function of a test
// package whose examples need the test server, leaves them out of the run
// (as -skip '^Example' would) when the server is not reachable, unless
// CI=true. An example cannot skip itself: without the server it would fail
// on its output, which says nothing of the cause. The tests still run and
// skip themselves (see Unavailable). A -skip given on the command line
// takes precedence.
func SkipExamplesUnlessReachable() { SkipExamplesMatchingUnlessReachable("^Example") }

// SkipExamplesMatchingUnlessReachable is SkipExamplesUnlessReachable for
// the examples pattern matches (as -skip reads it) alone: those of a
// package that need the server, beside some that do not.
func SkipExamplesMatchingUnlessReachable(pattern string) {
	if os.Getenv("CI") == "true" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := pgschema.Open(ServerURL())
	if err == nil {
		err = db.PingContext(ctx)
		db.Close()
	}
	if err == nil {
		return
	}
	testing.Init() // registers -test.skip; idempotent, and the command line is parsed later
	if serr := flag.Set("test.skip", pattern); serr != nil {
		return
	}
	fmt.Fprintf(os.Stderr, "skipping examples: PostgreSQL unreachable at %s (%v); start it with ../shared/services.sh, or set CI=true to fail instead\n",
		ServerURL(), err)
}
