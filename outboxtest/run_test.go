package outboxtest_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// The examples on PostgreSQL need the test server; without it they are
// left out of the run (unless CI=true) rather than fail on their output.
// The SQLite one needs nothing and always runs.
func init() { pgtest.SkipExamplesMatchingUnlessReachable(`^(Example|ExampleRequireScheduled)$`) }

// runTest runs test as go test would, for an Example, which has no
// testing.T: a failure or a skip is printed (and so fails the example on
// its output), and the cleanups run when test ends.
func runTest(name string, test func(testing.TB)) {
	tb := &exampleTB{name: name}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer tb.cleanup()
		test(tb)
	}()
	<-done
}

// exampleTB is the testing.TB of runTest. The harness and the example call
// the methods it has; the others are left to the nil TB it embeds.
type exampleTB struct {
	testing.TB
	name     string
	mu       sync.Mutex
	cleanups []func()
}

func (*exampleTB) Helper()              {}
func (tb *exampleTB) Name() string      { return tb.name }
func (*exampleTB) Log(...any)           {} // the relay's logs are not the example's output
func (*exampleTB) Logf(string, ...any)  {}
func (tb *exampleTB) Fatal(args ...any) { tb.stop(fmt.Sprint(args...)) }
func (tb *exampleTB) Fatalf(format string, args ...any) {
	tb.stop(fmt.Sprintf(format, args...))
}
func (tb *exampleTB) Skipf(format string, args ...any) {
	tb.stop("skipped: " + fmt.Sprintf(format, args...))
}
func (tb *exampleTB) Error(args ...any) { fmt.Println(args...) } // enttest's TestingT
func (tb *exampleTB) FailNow()          { tb.stop("failed") }

// TempDir is a directory removed when the test ends.
func (tb *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "outboxtest-example-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (tb *exampleTB) stop(msg string) {
	fmt.Println(msg)
	runtime.Goexit()
}

func (tb *exampleTB) Cleanup(fn func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, fn)
}

func (tb *exampleTB) cleanup() {
	tb.mu.Lock()
	fns := slices.Clone(tb.cleanups)
	tb.mu.Unlock()
	for _, fn := range slices.Backward(fns) {
		fn()
	}
}
