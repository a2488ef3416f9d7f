package consumer

import (
	"fmt"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/entoutbox/entoutbox/consumer/internal/payload"
)

// Every payload the package's tests check runs through both the generated
// check and the library's Validate (and parseFast beside encoding/json);
// TestMain fails the run if they ever disagree.
func init() {
	payload.CrossCheck = func(d string) {
		fastCheckDisagreements.Add(1)
		fmt.Fprintln(os.Stderr, "consumer: the generated schema check disagrees with the library:", d)
	}
	payload.Read = func(path string, generated bool) {
		n, _ := generatedReads.LoadOrStore(fmt.Sprintf("%s\x00%v", path, generated), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	payload.Observe = func(path string, p []byte, valid bool) {
		generatedVerdicts.Store(path+"\x00"+string(p), valid)
	}
}

var generatedVerdicts sync.Map

// generatedReads counts, per schema file and outcome, the payloads the
// generated readers read (true) or left to encoding/json (false).
var generatedReads sync.Map

// GeneratedReads is how many payloads given to the schema file at path
// the generated reader read, and how many it left to encoding/json.
func GeneratedReads(path string) (read, declined int64) {
	if n, ok := generatedReads.Load(path + "\x00true"); ok {
		read = n.(*atomic.Int64).Load()
	}
	if n, ok := generatedReads.Load(path + "\x00false"); ok {
		declined = n.(*atomic.Int64).Load()
	}
	return read, declined
}

// GeneratedVerdict is the generated check's verdict on the last payload
// given to the schema file at path (relative to the ent package), if any.
func GeneratedVerdict(path string, p []byte) (valid, seen bool) {
	v, ok := generatedVerdicts.Load(path + "\x00" + string(p))
	if !ok {
		return false, false
	}
	return v.(bool), true
}

var fastCheckDisagreements atomic.Int64

// FastCheckDisagreements is how many times the generated schema check and the
// library disagreed.
func FastCheckDisagreements() int64 { return fastCheckDisagreements.Load() }

// Listening reports whether the handler set of h, generated handlers,
// listens for other instances' moves of its positions (wake.go).
func Listening(h any) bool { return setOf(h).wake.listening() }

func setOf(h any) *Set {
	return (*Set)(unsafe.Pointer(reflect.ValueOf(h).Elem().FieldByName("set").Pointer()))
}

// PendingInBatches is how many events wait for a batch in the handler set
// of h, generated handlers (their unexported field set): a test holds a
// batch and waits for the others to queue behind it.
func PendingInBatches(h any) int {
	return setOf(h).batch.Pending()
}

// WithGapPauses sets the pauses between two looks at the position of a
// delivery waiting for its turn: long ones leave only a wake to end them.
func WithGapPauses(pause, behind time.Duration) Option {
	return func(c *Config) { c.gapPauses = gapPauses{min: pause, max: pause, behind: behind} }
}

// DecodePayload decodes payload as the handler set of h, generated
// handlers, decodes a message of event name at version (at most its
// latest).
func DecodePayload(h any, name string, version int, payload []byte) (any, error) {
	typ, ok := setOf(h).types[name]
	if !ok {
		return nil, fmt.Errorf("no event %q", name)
	}
	return typ.Decode(version, payload)
}

// WithoutFastCrossCheck runs the generated schema check alone until the
// end of tb, as outside tests (for benchmarks): no cross-check, no
// verdicts noted.
func WithoutFastCrossCheck(tb interface{ Cleanup(func()) }) {
	saved, observe, read := payload.CrossCheck, payload.Observe, payload.Read
	payload.CrossCheck, payload.Observe, payload.Read = nil, nil, nil
	tb.Cleanup(func() { payload.CrossCheck, payload.Observe, payload.Read = saved, observe, read })
}

// WithOutagePauses sets how long a delivery waits for an outage to end
// before it is nacked, and the longest pause between two probes of the
// database.
func WithOutagePauses(hold, probes time.Duration) Option {
	return func(c *Config) {
		c.outagePauses = defaultOutagePauses
		c.outagePauses.hold, c.outagePauses.probes = hold, probes
	}
}
