package entoutbox_test

import (
	"bytes"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

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
	require.Equal(t, 6, files, "%s: the page's programs are six files", page.name)

	goCommand(t, dir, "generate", "./...")
	goCommand(t, dir, "build", "-o", "shop", ".")
	goCommand(t, dir, "build", "-o", "billing-consumer", "./billing") // the separate consumer compiles

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

// guidePages are the pages whose Go blocks TestGuideSnippetsCompile builds:
// the README and every page of docs/ but getting started, whose blocks are
// the files of the program TestGettingStarted builds. A page added to docs/
// is checked without being named here.
func guidePages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	pages := []string{"README.md"}
	for _, d := range docs {
		if d = filepath.ToSlash(d); d != "docs/getting-started.md" {
			pages = append(pages, d)
		}
	}
	require.Contains(t, pages, "docs/operations.md")
	return pages
}

// preludes are what a fragment marked "go: body NAME" or "go: decl NAME"
// compiles with: the imports it may use and the variables it finds in
// scope. The examples' ent package stands in for the reader's.
var preludes = map[string]struct{ imports, decls string }{
	"orders": {
		imports: `
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/codegen"
	"github.com/entoutbox/entoutbox/console"
	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/examples/orders/ent"
	"github.com/entoutbox/entoutbox/examples/orders/orderevents"
	"github.com/entoutbox/entoutbox/metrics"
	"github.com/entoutbox/entoutbox/outbox"
	"github.com/entoutbox/entoutbox/outboxtest"
	"github.com/entoutbox/entoutbox/relay"
	"github.com/entoutbox/entoutbox/tracing"
`,
		decls: `
var (
	ctx    context.Context
	client *ent.Client
	tx     *ent.Tx
	db     *sql.DB
	b      broker.Broker
	router *message.Router
	h      *ent.OutboxHandlers
	t      *testing.T
	mux    *http.ServeMux
	logger watermill.LoggerAdapter
)
`,
	},
}

// TestGuideSnippetsCompile builds every Go block of the guide's pages: each
// one is marked with what it is (see package mdcode), so that a snippet
// that stops compiling fails here, at its page's line. Fragments compile
// with a prelude, where a variable declared and not used, or an import of
// the prelude a fragment does not use, is not an error.
func TestGuideSnippetsCompile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	newModule(t, dir, "example.com/snippets")
	snippets := 0
	for _, name := range guidePages(t) {
		p := readPage(t, name)
		for _, blk := range p.blocks {
			where := fmt.Sprintf("%s:%d", p.name, blk.Line)
			if blk.Lang == "" {
				t.Errorf("%s: a code block without a language; say what it is (go, sh, sql, json, text)", where)
				continue
			}
			if blk.Lang != "go" {
				continue
			}
			m := blk.Marker
			if m == nil {
				t.Errorf("%s: a Go block without a marker: put <!-- go: file -->, <!-- go: body orders -->, <!-- go: decl orders --> or <!-- not compiled: why --> on the line before it", where)
				continue
			}
			if m.Kind == "not compiled" {
				continue
			}
			if m.Kind != "go" {
				t.Errorf("%s: marker %q does not belong on a guide page", where, m.Kind)
				continue
			}
			src, err := snippetFile(p.name, blk)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			pkg := filepath.Join(dir, fmt.Sprintf("%s_%d", strings.NewReplacer("/", "_", ".", "_").Replace(p.name), blk.Line))
			require.NoError(t, os.MkdirAll(pkg, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(pkg, "snippet.go"), []byte(src), 0o644))
			if kind, name, _ := strings.Cut(m.Arg, " "); kind != "file" {
				pre := preludes[name]
				prelude := "package snippet\n\nimport (" + pre.imports + ")\n" + pre.decls
				require.NoError(t, os.WriteFile(filepath.Join(pkg, "prelude.go"), []byte(prelude), 0o644))
			}
			snippets++
		}
	}
	require.NotZero(t, snippets)

	cmd := exec.Command("go", "build", "-gcflags=-e", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"), "GOWORK=off")
	out, _ := cmd.CombinedOutput()
	var failures []string
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case line == "", strings.HasPrefix(line, "# "),
			strings.Contains(line, "declared and not used"), strings.Contains(line, "imported and not used"):
		default:
			failures = append(failures, line)
		}
	}
	require.Empty(t, failures, "the guide's Go blocks do not compile:\n%s", strings.Join(failures, "\n"))
}

// snippetFile is the Go file a marked block compiles as; a //line comment
// makes the compiler name the page's lines.
func snippetFile(page string, blk mdcode.Block) (string, error) {
	kind, name, _ := strings.Cut(blk.Marker.Arg, " ")
	at := fmt.Sprintf("//line %s:%d\n", page, blk.Line)
	if kind == "file" {
		return at + blk.Text, nil
	}
	pre, ok := preludes[name]
	if !ok {
		return "", fmt.Errorf("no prelude %q (the test's preludes say what a fragment compiles with)", name)
	}
	if kind == "decl" {
		return "package snippet\n\n" + at + blk.Text, nil
	}
	// A body may start with imports of its own: they join the prelude's.
	f, err := parser.ParseFile(token.NewFileSet(), "", "package snippet\n"+blk.Text, parser.ImportsOnly)
	if err != nil {
		return "", fmt.Errorf("reading the block's imports: %v", err)
	}
	imports, body := pre.imports, blk.Text
	if len(f.Imports) > 0 {
		var own strings.Builder
		for _, spec := range f.Imports {
			switch {
			case spec.Name != nil:
				own.WriteString("\t" + spec.Name.Name + " " + spec.Path.Value + "\n")
			case !strings.Contains(pre.imports, "\t"+spec.Path.Value+"\n"):
				own.WriteString("\t" + spec.Path.Value + "\n")
			}
		}
		imports += own.String()
		end := int(f.Decls[len(f.Decls)-1].End()) - 1 - len("package snippet\n")
		lines := strings.Count(blk.Text[:end], "\n")
		body = strings.Repeat("\n", lines) + blk.Text[end:]
	}
	return "package snippet\n\nimport (" + imports + ")\n\nfunc _() error {\n" + at + body + "\treturn nil\n}\n", nil
}

// TestDocLinks checks the links between the repository's pages: every
// relative link names a file that exists and, with a #fragment, a heading
// of that page.
func TestDocLinks(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	pages = append(pages, "README.md", "deploy/README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, name := range pages {
		p := readPage(t, filepath.ToSlash(name))
		for n, line := range strings.Split(withoutCode(p.text), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, fragment, _ := strings.Cut(target, "#")
				path := name
				if file != "" {
					path = filepath.Join(filepath.Dir(name), filepath.FromSlash(file))
				}
				where := fmt.Sprintf("%s:%d: link %s", name, n+1, target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				if fragment == "" {
					continue
				}
				text, err := os.ReadFile(path)
				require.NoError(t, err)
				if !slices.Contains(headingAnchors(string(text)), fragment) {
					t.Errorf("%s: %s has no heading #%s", where, path, fragment)
				}
			}
		}
	}
}

// withoutCode blanks the lines of code blocks, keeping the line count.
func withoutCode(text string) string {
	lines := strings.Split(text, "\n")
	in := ""
	for i, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		if in == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			in = trimmed[:3]
			lines[i] = ""
			continue
		}
		if in != "" {
			if strings.HasPrefix(trimmed, in) {
				in = ""
			}
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// headingAnchors are the anchors GitHub gives a page's headings.
func headingAnchors(text string) []string {
	var anchors []string
	seen := map[string]int{}
	for _, line := range strings.Split(withoutCode(text), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		a := slug.String()
		if n := seen[a]; n > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", a, n))
		} else {
			anchors = append(anchors, a)
		}
		seen[a]++
	}
	return anchors
}
