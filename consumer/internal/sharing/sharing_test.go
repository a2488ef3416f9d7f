package sharing

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every member computes the same division: the shares are disjoint and
// cover every partition, and differ by at most one.
func TestShareDividesEveryPartitionOnce(t *testing.T) {
	for _, members := range [][]string{{"a"}, {"a", "b"}, {"a", "b", "c"}, {"a", "b", "c", "d", "e"}} {
		for _, n := range []int{1, 2, 7, 16} {
			seen := map[int]string{}
			least, most := n, 0
			for _, m := range members {
				own := Share(members, m, n)
				least, most = min(least, len(own)), max(most, len(own))
				for _, k := range own {
					require.Empty(t, seen[k], "partition %d of %d read by %s and %s", k, n, seen[k], m)
					seen[k] = m
				}
			}
			require.Len(t, seen, n, "%d members, %d partitions: some unread", len(members), n)
			require.LessOrEqual(t, most-least, 1, "%d members, %d partitions: unfair", len(members), n)
		}
	}
	require.Equal(t, All(4), Share([]string{"a"}, "z", 4), "a member not in the list reads everything")
	require.True(t, slices.Equal([]int{0, 1, 2}, All(3)))
}
