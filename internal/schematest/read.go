package schematest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// ReadAlike reports where decoded, what a consumer read from payload
// written back as JSON, holds another value than a reader of the schema
// finds in payload: at every field the schema declares, at every depth,
// the value of the key as given (not of another key in another case), the
// default for an absent key that has one, and a zero value or nothing for
// an absent key without. Keys the schema does not declare are not read.
// Values compare as what they mean: numbers by value, times by instant,
// UUIDs in either case, base64 by bytes, JSON by content.
func ReadAlike(doc map[string]any, payload, decoded []byte) error {
	want, err := parse(payload)
	if err != nil {
		return fmt.Errorf("the payload: %w", err)
	}
	got, err := parse(decoded)
	if err != nil {
		return fmt.Errorf("what was read: %w", err)
	}
	return alike(node(doc), "", want, true, got, true)
}

func parse(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	return v, d.Decode(&v)
}

func alike(n node, path string, want any, hasWant bool, got any, hasGot bool) error {
	if !hasWant {
		def, ok := n["default"]
		if !ok {
			if hasGot && !zeroLike(n, got) {
				return fmt.Errorf("%s: absent from the payload, read as %s", where(path), show(got))
			}
			return nil
		}
		want, hasWant = def, true
	}
	if want == nil {
		if hasGot && got != nil {
			return fmt.Errorf("%s: null in the payload, read as %s", where(path), show(got))
		}
		return nil
	}
	if !hasGot || got == nil {
		if zeroLike(n, want) {
			return nil
		}
		return fmt.Errorf("%s: %s in the payload, read as nothing", where(path), show(want))
	}
	mismatch := func() error {
		return fmt.Errorf("%s: %s in the payload, read as %s", where(path), show(want), show(got))
	}
	switch {
	case n.props() != nil:
		w, wok := want.(map[string]any)
		g, gok := got.(map[string]any)
		if !wok || !gok {
			return mismatch()
		}
		for _, k := range sortedKeys(n.props()) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			wv, hw := w[k]
			gv, hg := g[k]
			if err := alike(n.props()[k].(map[string]any), p, wv, hw, gv, hg); err != nil {
				return err
			}
		}
		return nil
	case n.isMap():
		w, wok := want.(map[string]any)
		g, gok := got.(map[string]any)
		if !wok || !gok || len(w) != len(g) {
			return mismatch()
		}
		for _, k := range sortedKeys(w) {
			gv, hg := g[k]
			if err := alike(n.sub("additionalProperties"), fmt.Sprintf("%s[%q]", path, k), w[k], true, gv, hg); err != nil {
				return err
			}
		}
		return nil
	case n.is("array") && n.sub("items") != nil:
		w, wok := want.([]any)
		g, gok := got.([]any)
		if !wok || !gok || len(w) != len(g) {
			return mismatch()
		}
		for i := range w {
			if err := alike(n.sub("items"), fmt.Sprintf("%s[%d]", path, i), w[i], true, g[i], true); err != nil {
				return err
			}
		}
		return nil
	}
	if !sameValue(n, want, got) {
		return mismatch()
	}
	return nil
}

func where(path string) string {
	if path == "" {
		return "the payload"
	}
	return "field " + strconv.Quote(path)
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// sameValue compares scalars, and any JSON value, as what they mean.
func sameValue(n node, want, got any) bool {
	ws, wstr := want.(string)
	gs, gstr := got.(string)
	switch {
	case wstr && gstr && n.str("format") == "date-time":
		wt, err1 := time.Parse(time.RFC3339Nano, ws)
		gt, err2 := time.Parse(time.RFC3339Nano, gs)
		return err1 == nil && err2 == nil && wt.Equal(gt)
	case wstr && gstr && n.str("format") == "uuid":
		return strings.EqualFold(ws, gs)
	case wstr && gstr && n.str("contentEncoding") == "base64":
		wb, err1 := base64.StdEncoding.DecodeString(ws)
		gb, err2 := base64.StdEncoding.DecodeString(gs)
		return err1 == nil && err2 == nil && bytes.Equal(wb, gb)
	}
	wn, wnum := want.(json.Number)
	gn, gnum := got.(json.Number)
	if wnum && gnum && n.is("number") && !n.is("integer") {
		wf, err1 := strconv.ParseFloat(string(wn), 64)
		gf, err2 := strconv.ParseFloat(string(gn), 64)
		return err1 == nil && err2 == nil && wf == gf
	}
	return canonical(want) == canonical(got)
}

// canonical is v as JSON with sorted keys and numbers by exact value.
func canonical(v any) string {
	switch x := v.(type) {
	case json.Number:
		r, ok := new(big.Rat).SetString(string(x))
		if !ok {
			return string(x)
		}
		return r.RatString()
	case map[string]any:
		var parts []string
		for _, k := range sortedKeys(x) {
			parts = append(parts, strconv.Quote(k)+":"+canonical(x[k]))
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		var parts []string
		for _, e := range x {
			parts = append(parts, canonical(e))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return show(v)
}

// zeroLike tells whether v is what an absent optional key reads as: a
// zero value of its kind (which Go leaves out with omitzero).
func zeroLike(n node, v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		switch {
		case x == "":
			return true
		case n.str("format") == "uuid":
			return strings.Trim(strings.ReplaceAll(x, "-", ""), "0") == ""
		case n.str("format") == "date-time":
			t, err := time.Parse(time.RFC3339Nano, x)
			return err == nil && t.IsZero()
		}
	case json.Number:
		if n.is("number") && !n.is("integer") { // a double, as every reader holds it: 1e-400 is 0
			f, err := strconv.ParseFloat(string(x), 64)
			return err == nil && f == 0
		}
		r, ok := new(big.Rat).SetString(string(x))
		return ok && r.Sign() == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
