package payload

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// parseFast reads payload as jsonschema.UnmarshalJSON does (encoding/json,
// numbers as json.Number, a key given twice read with its last value) when
// payload keeps to plain JSON: no escape in a string, valid UTF-8, no
// deep nesting. It returns ok false for anything else, valid or not, and
// encoding/json then reads payload and words its errors. It also counts
// the keys written, as keysWritten does.
func parseFast(payload []byte) (doc any, keys int, ok bool) {
	p := fastParser{b: payload}
	v, ok := p.value(0)
	if !ok {
		return nil, 0, false
	}
	p.space()
	if p.i != len(p.b) {
		return nil, 0, false
	}
	return v, p.keys, true
}

type fastParser struct {
	b    []byte
	i    int
	keys int
}

// maxFastDepth is far below encoding/json's limit of 10000: deeper
// payloads are left to it.
const maxFastDepth = 100

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) value(depth int) (any, bool) {
	p.space()
	if p.i >= len(p.b) || depth > maxFastDepth {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.string()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += 4
		return true, true
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += 5
		return false, true
	case bytes.HasPrefix(p.b[p.i:], []byte("null")):
		p.i += 4
		return nil, true
	}
	return nil, false
}

func (p *fastParser) object(depth int) (any, bool) {
	p.i++ // {
	obj := map[string]any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return obj, true
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, false
		}
		k, ok := p.string()
		if !ok {
			return nil, false
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, false
		}
		p.i++
		p.keys++
		v, ok := p.value(depth + 1)
		if !ok {
			return nil, false
		}
		obj[k.(string)] = v
		if end, ok := p.separator('}'); !ok || end {
			return obj, ok
		}
	}
}

func (p *fastParser) array(depth int) (any, bool) {
	p.i++ // [
	arr := []any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return arr, true
	}
	for {
		v, ok := p.value(depth + 1)
		if !ok {
			return nil, false
		}
		arr = append(arr, v)
		if end, ok := p.separator(']'); !ok || end {
			return arr, ok
		}
	}
}

// separator reads what follows a member or an element: a comma (end
// false), the closing byte (end true), or anything else (ok false).
func (p *fastParser) separator(closing byte) (end, ok bool) {
	p.space()
	if p.i >= len(p.b) {
		return false, false
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		return false, true
	case closing:
		p.i++
		return true, true
	}
	return false, false
}

// string reads a string without escapes, of valid UTF-8 and no control
// character.
func (p *fastParser) string() (any, bool) {
	start := p.i + 1
	end := bytes.IndexByte(p.b[start:], '"')
	if end < 0 {
		return nil, false
	}
	s := p.b[start : start+end]
	ascii := true
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return nil, false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	if !ascii && !utf8.Valid(s) {
		return nil, false
	}
	p.i = start + end + 1
	return string(s), true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *fastParser) number() (any, bool) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.digits() == 0:
		return nil, false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return nil, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return nil, false
		}
	}
	return json.Number(p.b[start:p.i]), true
}

func (p *fastParser) digits() int {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}
