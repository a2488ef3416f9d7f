package entoutbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/mdcode"
	"github.com/entoutbox/entoutbox/internal/pgtest"
)

// TestGettingStarted builds the program of docs/getting-started.md from the
// page itself (each block marked "file: PATH" is that file), as a module of
// its own that takes this repository in place of the published module, runs
// go generate and go build as the page says, and runs the program on a
// schema of the test's own: it must print what the page shows and leave
// billing's invoice and dedupe record behind.
func TestGettingStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds the page's program as a module of its own and runs it (minutes on a busy machine)")
	}
	t.Parallel()
	page := readPage(t, "docs/getting-started.md")
	db := pgtest.New(t)

	dir := t.TempDir()
	newModule(t, dir, "example.com/shop")
	files := 0
	for _, b := range page.blocks {
		if b.Lang == "go" && (b.Marker == nil || b.Marker.Kind != "file") {
			t.Errorf("%s:%d: a Go block of the getting-started page that is not one of its program's files (mark it <!-- file: PATH -->)", page.name, b.Line)
		}
		if b.Marker == nil || b.Marker.Kind != "file" {
			continue
		}
		path := filepath.Join(dir, filepath.FromSlash(b.Marker.Arg))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		// The compiler's errors name the page's lines.
		text := fmt.Sprintf("//line %s:%d\n%s", page.name, b.Line, b.Text)
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644), "%s:%d", page.name, b.Line)
		files++
	}
	require.Equal(t, 5, files, "%s: the page's program is five files", page.name)

	goCommand(t, dir, "generate", "./...")
	goCommand(t, dir, "build", "-o", "shop", ".")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "shop"))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the page's program failed:\n%s", out)
	t.Logf("the page's program said:\n%s", out)
	shown := page.blockAfter(t, "## 6. Run it", "text")
	for _, line := range strings.Split(strings.TrimSpace(shown.Text), "\n") {
		require.True(t, printed(string(out), line), "%s:%d shows a line the program does not print: %s", page.name, shown.Line, line)
	}

	var invoices, processed int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM invoices WHERE order_id = 1 AND amount_cents = 4200`).Scan(&invoices))
	require.Equal(t, 1, invoices, "billing's invoice")
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM outbox_processed_events WHERE consumer = 'billing'`).Scan(&processed))
	require.Equal(t, 1, processed, "billing's dedupe record")
}

// printed tells whether a line of out holds every word of line: a logged
// line's attributes come in any order.
func printed(out, line string) bool {
	for _, o := range strings.Split(out, "\n") {
		words := map[string]bool{}
		for _, w := range strings.Fields(o) {
			words[w] = true
		}
		all := true
		for _, w := range strings.Fields(line) {
			all = all && words[w]
		}
		if all {
			return true
		}
	}
	return false
}

// page is a Markdown page of the repository and its code blocks.
type page struct {
	name   string // the path from the repository's root
	text   string
	blocks []mdcode.Block
}

func readPage(t *testing.T, name string) page {
	t.Helper()
	text, err := os.ReadFile(filepath.FromSlash(name))
	require.NoError(t, err)
	blocks, err := mdcode.Parse(text)
	require.NoError(t, err, "%s", name)
	return page{name: name, text: string(text), blocks: blocks}
}

// blockAfter is the first block of lang after the line heading.
func (p page) blockAfter(t *testing.T, heading, lang string) mdcode.Block {
	t.Helper()
	i := strings.Index(p.text, "\n"+heading+"\n")
	require.NotEqual(t, -1, i, "%s has no heading %q", p.name, heading)
	line := strings.Count(p.text[:i+1], "\n") + 1
	for _, b := range p.blocks {
		if b.Line > line && b.Lang == lang {
			return b
		}
	}
	t.Fatalf("%s has no %s block after %q", p.name, lang, heading)
	return mdcode.Block{}
}

// newModule starts module path in dir, requiring this repository's module
// in place of the published one, with this repository's go.sum.
func newModule(t *testing.T, dir, path string) {
	t.Helper()
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	mod := "module " + path + "\n\ngo 1.26\n\n" +
		"require github.com/entoutbox/entoutbox v0.0.0\n\n" +
		"replace github.com/entoutbox/entoutbox => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
}

// goCommand runs the go command in dir, adding to go.mod what the code
// imports (as the page's go mod tidy does, without looking beyond the
// module cache for test dependencies).
func goCommand(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "go %s in the page's module:\n%s", strings.Join(args, " "), out.Bytes())
	return out.Bytes()
}
