package codegen_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/codegen"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// declOrder rearranges every list of fields the declarations below make
// (a payload's, an object's), and the list of events: a declaration order
// that is not part of the contract. Generation calls Versions more than
// once, so it must give the same order for the same list each time.
var declOrder = func(n int) []int { return identity(n) }

func identity(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

func arrange[T any](xs ...T) []T {
	out := make([]T, 0, len(xs))
	for _, i := range declOrder(len(xs)) {
		out = append(out, xs[i])
	}
	return out
}

// DetOrderPlaced, DetOrderShipped and DetProfileUpdated have many required
// keys at every depth, so that an unordered `required` cannot come out
// the same by chance; two of them share a topic.
type DetOrderPlaced struct{ events.Schema }

func (DetOrderPlaced) Name() string      { return "det.order.placed" }
func (DetOrderPlaced) Topic() string     { return "det.orders" }
func (DetOrderPlaced) Aggregate() string { return "Order" }
func (DetOrderPlaced) Versions() []events.Version {
	return []events.Version{
		events.V(1, arrange[field.Field](
			field.Int64("order_id"), field.String("customer"), field.Int64("total_cents"),
			field.Time("placed_at"), field.UUID("cart_id"), field.String("channel"),
			field.Objects("lines", arrange[field.Field](field.String("sku"), field.Int("qty").Min(1),
				field.Int64("unit_cents"), field.String("title"), field.String("note").Optional())...),
			field.Object("address", arrange[field.Field](field.String("street"), field.String("city"),
				field.String("zip"), field.String("country"), field.String("floor").Optional())...),
		)...),
		events.V(2, arrange[field.Field](
			field.Int64("order_id"), field.String("customer"), field.Int64("total_cents"),
			field.Time("placed_at"), field.UUID("cart_id"), field.String("channel"),
			field.String("currency").Default("EUR"),
			field.Objects("lines", arrange[field.Field](field.String("sku"), field.Int("qty").Min(1),
				field.Int64("unit_cents"), field.String("title"), field.String("note").Optional())...),
			field.Object("address", arrange[field.Field](field.String("street"), field.String("city"),
				field.String("zip"), field.String("country"), field.String("floor").Optional())...),
			field.Map("stock", field.Object("", arrange[field.Field](field.Int("on_hand"), field.Int("reserved"),
				field.Int("incoming"), field.String("bin").Optional())...)).Optional(),
		)...),
	}
}

type DetOrderShipped struct{ events.Schema }

func (DetOrderShipped) Name() string      { return "det.order.shipped" }
func (DetOrderShipped) Topic() string     { return "det.orders" }
func (DetOrderShipped) Aggregate() string { return "Order" }
func (DetOrderShipped) Versions() []events.Version {
	return []events.Version{events.V(1, arrange[field.Field](
		field.Int64("order_id"), field.String("carrier"), field.String("tracking"),
		field.Time("shipped_at"), field.Enum("speed").Values("slow", "fast"),
		field.Int("parcels").Positive(), field.Bool("insured").Nillable(),
	)...)}
}

type DetProfileUpdated struct{ events.Schema }

func (DetProfileUpdated) Name() string      { return "det.profile.updated" }
func (DetProfileUpdated) Topic() string     { return "det.profiles" }
func (DetProfileUpdated) Aggregate() string { return "Profile" }
func (DetProfileUpdated) Versions() []events.Version {
	return []events.Version{events.V(1, arrange[field.Field](
		field.Int64("user_id"), field.String("display_name").MaxLen(64), field.Bool("verified"),
		field.Float64("balance"), field.Bytes("signature"), field.JSON("settings"),
		field.Strings("tags"), field.Int64s("friend_ids"), field.String("locale").Default("en"),
		field.String("nickname").Optional(),
	)...)}
}

// TestContractFilesAreDeterministic generates the same declarations many
// times, and in other orders of their fields and events, and requires
// every contract file (each version's JSON Schema, the AsyncAPI document,
// the lock) to come out byte for byte the same: a generation that only
// reorders them would show as a change in review, and in the AsyncAPI
// document's info.version.
func TestContractFilesAreDeterministic(t *testing.T) {
	t.Cleanup(func() { declOrder = identity })
	generateContract := func(t *testing.T) map[string][]byte {
		t.Helper()
		out := t.TempDir()
		c := goldenCase{name: "determinism", schemaPkg: "schema", schemas: caseNamed(t, "versions").schemas,
			events: arrange[events.Interface](DetOrderPlaced{}, DetOrderShipped{}, DetProfileUpdated{})}
		require.NoError(t, generate(t, c, out))
		files := readTree(t, filepath.Join(out, codegen.ContractDir))
		lock, err := os.ReadFile(filepath.Join(out, codegen.LockFile))
		require.NoError(t, err)
		files[codegen.LockFile] = lock
		return files
	}

	declOrder = identity
	want := generateContract(t)
	requireManyRequiredKeys(t, want)

	reversed := func(n int) []int { p := identity(n); slices.Reverse(p); return p }
	shuffled := func(seed uint64) func(int) []int {
		return func(n int) []int { return rand.New(rand.NewPCG(seed, uint64(n))).Perm(n) }
	}
	orders := map[string]func(int) []int{"reversed": reversed}
	for i := range 5 {
		orders[fmt.Sprintf("declared order again (%d)", i+1)] = identity
		orders[fmt.Sprintf("shuffled (seed %d)", i+1)] = shuffled(uint64(i + 1))
	}
	for name, order := range orders {
		declOrder = order
		got := generateContract(t)
		require.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)), "%s: other contract files", name)
		for file, content := range want {
			if string(got[file]) != string(content) {
				t.Errorf("%s: %s is not the same bytes as the first generation's: %s", name, file, firstDiff(content, got[file]))
			}
		}
	}
}

// requireManyRequiredKeys makes sure the declarations exercise `required`:
// the payload schema of det.order.placed v2 requires several keys, at the
// top and in its nested objects.
func requireManyRequiredKeys(t *testing.T, files map[string][]byte) {
	t.Helper()
	var s struct {
		Required   []string
		Properties map[string]struct {
			Required []string
			Items    struct{ Required []string }
		}
	}
	path := codegen.SchemaPath("det.order.placed", 2)
	require.NoError(t, json.Unmarshal(files[path], &s), path)
	require.Len(t, s.Required, 8, "%s: required", path)
	require.Len(t, s.Properties["address"].Required, 4, "%s: address's required", path)
	require.Len(t, s.Properties["lines"].Items.Required, 4, "%s: lines[]'s required", path)
}
