package pgsql

import (
	"slices"
	"testing"
)

// A name keeps the number its first use took; numbers follow first uses.
func TestParamsNumberByFirstUse(t *testing.T) {
	var p Params[string]
	got := []string{p.Ref("after"), p.Ref("limit"), p.Ref("topic"), p.Ref("after"), p.Ref("limit")}
	if want := []string{"$1", "$2", "$3", "$1", "$2"}; !slices.Equal(got, want) {
		t.Fatalf("refs %v, want %v", got, want)
	}
	if names := p.Names(); !slices.Equal(names, []string{"after", "limit", "topic"}) {
		t.Fatalf("names %v", names)
	}
}
