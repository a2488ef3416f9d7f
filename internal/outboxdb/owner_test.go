package outboxdb_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sqlText is what a string literal holding a statement on a table looks
// like: a query reading from one, or a write or a change of one.
var sqlText = regexp.MustCompile(`(?is)\bselect\b.*\bfrom\b|\binsert\s+into\b|\bupdate\s+(\S+\s+set\b|$)|\breturning\b|\bdelete\s+from\b|` +
	`\b(alter|drop|truncate|lock)\s+table\b|\bcreate\s+(unique\s+)?(table|index)\b|\bon\s+conflict\b`)

// outsideTheModule is where SQL is not the module's own: generated ent
// code, the benchmark's hand-written baselines and sandboxes, the example
// app's business tables, test fixtures.
var outsideTheModule = []string{"ent", "bench", "examples", "internal/testent", "internal/pgtest", "codegen/testdata", "node_modules"}

// notOnTheOutbox is the SQL outside this package that is on no table of
// the outbox's, by file, with the reason.
var notOnTheOutbox = map[string]string{}

// TestNoSQLOnTheOutboxElsewhere holds that this package is the one place
// the module writes SQL on the outbox's tables: a string literal that reads
// like a statement on a table, in any other non-test file of the module, is
// refused unless listed above as on other tables.
func TestNoSQLOnTheOutboxElsewhere(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "internal/outboxdb" || slices.Contains(outsideTheModule, rel) || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil || ast.IsGenerated(f) {
			return err
		}
		for _, line := range sqlLiterals(fset, f) {
			_, other := notOnTheOutbox[rel]
			if !other {
				t.Errorf("%s:%d writes SQL; statements on the outbox's tables belong in internal/outboxdb "+
					"(or list the file in notOnTheOutbox with the reason)", rel, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sqlLiterals is the lines of f's string literals that read like SQL on a
// table.
func sqlLiterals(fset *token.FileSet, f *ast.File) []int {
	var lines []int
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		if s, err := strconv.Unquote(lit.Value); err == nil && sqlText.MatchString(s) {
			lines = append(lines, fset.Position(lit.Pos()).Line)
		}
		return true
	})
	return lines
}
