package fleet

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Rendezvous hashing spreads 200 tenants over 3 members near evenly, and
// a member leaving moves its tenants only, spread over the two others;
// joining again takes back exactly those.
func TestRendezvousSpreadsAndMovesOnlyTheLeaversTenants(t *testing.T) {
	members := []string{"host-a-101-1f2e3d", "host-b-102-4c5b6a", "host-c-103-7f8e9d"}
	tenants := make([]string, 200)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%03d", i)
	}
	before := map[string]string{}
	count := map[string]int{}
	for _, tn := range tenants {
		before[tn] = rendezvous(members, tn)
		count[before[tn]]++
	}
	for _, m := range members {
		require.GreaterOrEqual(t, count[m], 45, "member %s's share of 200 tenants: %v", m, count)
		require.LessOrEqual(t, count[m], 90, "member %s's share of 200 tenants: %v", m, count)
	}
	left := members[:2]
	moved := map[string]int{}
	for _, tn := range tenants {
		now := rendezvous(left, tn)
		if before[tn] != members[2] {
			require.Equal(t, before[tn], now, "tenant %s moved though its member stayed", tn)
			continue
		}
		moved[now]++
	}
	require.Len(t, moved, 2, "the leaver's tenants go to both others: %v", moved)
	for _, tn := range tenants {
		require.Equal(t, before[tn], rendezvous([]string{members[2], members[0], members[1]}, tn),
			"the same members in another order give tenant %s the same member", tn)
	}
	require.Empty(t, rendezvous(nil, "tenant-000"))
}
