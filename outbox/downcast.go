package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/entoutbox/entoutbox/events"
)

// The helpers below serve the generated Emit given events.AsVersion: it
// reads the downcast payload back as a consumer of the latest version does
// (upcasting it in the JSON form where the declaration's Upcast runs) and
// refuses to write it when that reads something else than the payload.

// For generated code. DecodeFields decodes a payload into the form an
// upcaster takes: JSON objects as maps, numbers as json.Number.
func DecodeFields(payload []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var fields map[string]any
	if err := d.Decode(&fields); err != nil {
		return nil, fmt.Errorf("payload is not a JSON object: %w", err)
	}
	return fields, nil
}

// For generated code. FillDefaults sets each default whose key fields
// lacks: an automatic step between two versions in the upcast path.
func FillDefaults(fields, defaults map[string]any) {
	for k, v := range defaults {
		if _, ok := fields[k]; !ok {
			fields[k] = v
		}
	}
}

// For generated code. CheckDowncast compares the encoded latest payload of
// event with readBack: what consumers of the latest version read from its
// downcast to version, encoded as the latest. The first field where they
// differ, in key order, is a value the downcast loses, returned as an
// *events.LossError. maps are the wire paths of the latest version's map
// fields ("attributes", "lines[].tags"): their keys are shown as
// attributes["k"] rather than as fields.
func CheckDowncast(event string, version, latest int, payload, readBack []byte, maps ...string) error {
	want, err := decodeNumbers(payload)
	if err != nil {
		return fmt.Errorf("entoutbox: checking the %q payload as version %d: %w", event, version, err)
	}
	got, err := decodeNumbers(readBack)
	if err != nil {
		return fmt.Errorf("entoutbox: checking the %q payload as version %d: %w", event, version, err)
	}
	d, ok := firstDifference(place{maps: maps}, want, got)
	if !ok {
		return nil
	}
	return &events.LossError{Event: event, Version: version, Latest: latest, Field: d.at.path,
		Value: shortJSON(d.want), ReadAs: shortJSON(d.got)}
}

func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// absent stands for a key an object lacks.
type absent struct{}

// place is where a value is: its path as errors show it (lines[2].unit,
// attributes["k"]) and as declarations name it (lines[].unit,
// attributes{}), which tells whether an object is a map.
type place struct {
	path, wire string
	maps       []string
}

func (p place) key(k string) place {
	if p.path == "" {
		return place{path: k, wire: k, maps: p.maps}
	}
	if slices.Contains(p.maps, p.wire) {
		return place{path: p.path + "[" + strconv.Quote(k) + "]", wire: p.wire + "{}", maps: p.maps}
	}
	return place{path: p.path + "." + k, wire: p.wire + "." + k, maps: p.maps}
}

func (p place) index(i int) place {
	return place{path: p.path + "[" + strconv.Itoa(i) + "]", wire: p.wire + "[]", maps: p.maps}
}

type difference struct {
	at        place
	want, got any
}

// firstDifference finds the first place where got differs from want,
// visiting object keys in order.
func firstDifference(at place, want, got any) (difference, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			wv, ok := w[k]
			if !ok {
				wv = absent{}
			}
			gv, ok := g[k]
			if !ok {
				gv = absent{}
			}
			if d, ok := firstDifference(at.key(k), wv, gv); ok {
				return d, true
			}
		}
		return difference{}, false
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			break
		}
		for i := range w {
			if d, ok := firstDifference(at.index(i), w[i], g[i]); ok {
				return d, true
			}
		}
		return difference{}, false
	default:
		if reflect.DeepEqual(want, got) {
			return difference{}, false
		}
	}
	return difference{at: at, want: want, got: got}, true
}

// shortJSON renders a value for an error: JSON, cut after 80 bytes; "" for
// an absent one.
func shortJSON(v any) string {
	if _, ok := v.(absent); ok {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const limit = 80
	if len(b) > limit {
		return strings.ToValidUTF8(string(b[:limit]), "") + "…"
	}
	return string(b)
}
