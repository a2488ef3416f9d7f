package walpath

import "testing"

// The stream's 32-bit transaction ids widen to the 64-bit id nearest a
// recent one, on either side of it and across an epoch's end.
func TestFullXID(t *testing.T) {
	const epoch = uint64(1) << 32
	for _, tc := range []struct {
		xid  uint32
		next uint64
		want uint64
	}{
		{xid: 700, next: 800, want: 700},
		{xid: 805, next: 800, want: 805}, // committed, not yet counted in xmax
		{xid: 4294967290, next: 3*epoch + 10, want: 2*epoch + 4294967290},
		{xid: 5, next: 3*epoch - 10, want: 3*epoch + 5},
		{xid: 100, next: 5*epoch + 100, want: 5*epoch + 100},
	} {
		if got := fullXID(tc.xid, tc.next); got != tc.want {
			t.Errorf("fullXID(%d, %d) = %d, want %d", tc.xid, tc.next, got, tc.want)
		}
	}
}
