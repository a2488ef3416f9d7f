package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/outbox"
)

// CheckDowncast names the first field, in key order, that consumers of the
// latest version would read differently, by its path: list elements by
// index, map entries by key, objects by field.
func TestCheckDowncastNamesTheField(t *testing.T) {
	tests := []struct {
		name              string
		payload, readBack string
		want              *events.LossError // nil: nothing lost
	}{
		{"same", `{"a":1,"b":{"c":[1,2]}}`, `{"b":{"c":[1,2]},"a":1}`, nil},
		{"big numbers compared exactly", `{"n":9007199254740993}`, `{"n":9007199254740992}`,
			&events.LossError{Field: "n", Value: "9007199254740993", ReadAs: "9007199254740992"}},
		{"absent when read back", `{"a":1,"note":"x"}`, `{"a":1}`, &events.LossError{Field: "note", Value: `"x"`}},
		{"first in key order", `{"z":1,"a":1}`, `{"z":2,"a":2}`, &events.LossError{Field: "a", Value: "1", ReadAs: "2"}},
		{"list element", `{"lines":[{"u":"kg"},{"u":"g"}]}`, `{"lines":[{"u":"kg"},{"u":"piece"}]}`,
			&events.LossError{Field: "lines[1].u", Value: `"g"`, ReadAs: `"piece"`}},
		{"map entry", `{"attrs":{"k":{"v":"x","w":"y"}}}`, `{"attrs":{"k":{"v":"x","w":"d"}}}`,
			&events.LossError{Field: `attrs["k"].w`, Value: `"y"`, ReadAs: `"d"`}},
		{"map in a list", `{"lines":[{"tags":{"a.b":1}}]}`, `{"lines":[{"tags":{"a.b":2}}]}`,
			&events.LossError{Field: `lines[0].tags["a.b"]`, Value: "1", ReadAs: "2"}},
		{"list length", `{"xs":[1,2]}`, `{"xs":[1]}`, &events.LossError{Field: "xs", Value: "[1,2]", ReadAs: "[1]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := outbox.CheckDowncast("e", 1, 2, []byte(tt.payload), []byte(tt.readBack), "attrs", "lines[].tags")
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			tt.want.Event, tt.want.Version, tt.want.Latest = "e", 1, 2
			require.Equal(t, tt.want, err)
		})
	}
}
