// Package mdcode reads the fenced code blocks of a Markdown page, each with
// the marker comment written on the line before it, so that tests can build
// the code a page shows and fail when it no longer compiles.
//
// A marker is an HTML comment, invisible once the page is rendered:
//
//	<!-- file: ent/schema/schema.go -->   the block is that file of the page's program
//	<!-- go: file -->                     a whole Go file, compiled as a package of its own
//	<!-- go: body PRELUDE -->             statements, compiled in a function after the named prelude
//	<!-- go: decl PRELUDE -->             declarations (imports first, if any), in the prelude's package
//	<!-- not compiled: why -->            Go shown on purpose as something that does not compile
//
// Only the fences the page writes are read (``` or ~~~, indented as in a
// list item); a block's text has the fence's indentation removed.
package mdcode

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	// Lang is the first word of the fence's info string: "go", "sh", or ""
	// for a fence that names none.
	Lang string
	// Marker is the marker on the line before the fence (blank lines
	// allowed between), or nil.
	Marker *Marker
	// Line is the page's line number of the block's first line of code.
	Line int
	// Text is the code, each line ending with a newline.
	Text string
}

// Marker is the comment that says what a block is.
type Marker struct {
	Kind string // "file", "go" or "not compiled"
	Arg  string // the rest: the file path, "file", "body NAME", "decl NAME", or the reason
	Line int    // where the marker is
}

// Parse returns the fenced code blocks of a Markdown page, in order. A
// fence left open, or a marker comment that is not one of the kinds above,
// is an error naming its line.
func Parse(page []byte) ([]Block, error) {
	var (
		blocks []Block
		marker *Marker
		open   *Block
		fence  string // the opening fence's backticks or tildes
		indent int    // the opening fence's indentation
		code   strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		if open != nil {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" ") == "" {
				open.Text = code.String()
				blocks = append(blocks, *open)
				open, marker = nil, nil
				continue
			}
			code.WriteString(dedent(line, indent))
			code.WriteByte('\n')
			continue
		}
		if f := fenceOf(trimmed); f != "" {
			fence, indent = f, len(line)-len(trimmed)
			open = &Block{Marker: marker, Line: n + 1}
			if info := strings.Fields(trimmed[len(f):]); len(info) > 0 {
				open.Lang = info[0]
			}
			code.Reset()
			continue
		}
		switch m, err := markerOf(trimmed, n); {
		case err != nil:
			return nil, err
		case m != nil:
			marker = m
		case trimmed != "":
			marker = nil // a marker stands right before its block
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if open != nil {
		return nil, fmt.Errorf("line %d: the code block opened here is never closed", open.Line-1)
	}
	return blocks, nil
}

// fenceOf returns the fence a line opens (three or more backticks or
// tildes), or "".
func fenceOf(trimmed string) string {
	for _, c := range []string{"`", "~"} {
		n := len(trimmed) - len(strings.TrimLeft(trimmed, c))
		if n >= 3 {
			return trimmed[:n]
		}
	}
	return ""
}

// markerOf reads a marker comment, nil for a line that is not one.
func markerOf(trimmed string, n int) (*Marker, error) {
	body, ok := strings.CutPrefix(trimmed, "<!--")
	if !ok {
		return nil, nil
	}
	body, ok = strings.CutSuffix(body, "-->")
	if !ok {
		return nil, nil // a comment over several lines is prose, not a marker
	}
	kind, arg, ok := strings.Cut(strings.TrimSpace(body), ":")
	if !ok {
		return nil, nil
	}
	m := &Marker{Kind: strings.TrimSpace(kind), Arg: strings.TrimSpace(arg), Line: n}
	switch m.Kind {
	case "file", "not compiled":
		if m.Arg == "" {
			return nil, fmt.Errorf("line %d: marker %q says nothing after the colon", n, trimmed)
		}
	case "go":
		f := strings.Fields(m.Arg)
		switch {
		case len(f) == 1 && f[0] == "file":
		case len(f) == 2 && (f[0] == "body" || f[0] == "decl"):
		default:
			return nil, fmt.Errorf(`line %d: marker %q: want "go: file", "go: body PRELUDE" or "go: decl PRELUDE"`, n, trimmed)
		}
	default:
		return nil, nil // another comment
	}
	return m, nil
}

// dedent removes up to n leading spaces.
func dedent(line string, n int) string {
	i := 0
	for i < n && i < len(line) && line[i] == ' ' {
		i++
	}
	return line[i:]
}
