package codegen_test

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"entgo.io/ent"
	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
	"entgo.io/ent/entc/load"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/codegen"
	bad_default "github.com/entoutbox/entoutbox/codegen/testdata/bad_default/events"
	default_maxlen "github.com/entoutbox/entoutbox/codegen/testdata/default_maxlen/events"
	duplicate_event_name "github.com/entoutbox/entoutbox/codegen/testdata/duplicate_event_name/events"
	duplicate_field "github.com/entoutbox/entoutbox/codegen/testdata/duplicate_field/events"
	empty_name "github.com/entoutbox/entoutbox/codegen/testdata/empty_name/events"
	invalid_identifier "github.com/entoutbox/entoutbox/codegen/testdata/invalid_identifier/events"
	invalid_topic "github.com/entoutbox/entoutbox/codegen/testdata/invalid_topic/events"
	kinds "github.com/entoutbox/entoutbox/codegen/testdata/kinds/events"
	missing_outbox "github.com/entoutbox/entoutbox/codegen/testdata/missing_outbox/events"
	missing_upcaster "github.com/entoutbox/entoutbox/codegen/testdata/missing_upcaster/events"
	"github.com/entoutbox/entoutbox/codegen/testdata/noschema"
	removed_field "github.com/entoutbox/entoutbox/codegen/testdata/removed_field/events"
	"github.com/entoutbox/entoutbox/codegen/testdata/schema"
	type_collision "github.com/entoutbox/entoutbox/codegen/testdata/type_collision/events"
	upcast "github.com/entoutbox/entoutbox/codegen/testdata/upcast/events"
	version_numbering "github.com/entoutbox/entoutbox/codegen/testdata/version_numbering/events"
	versions "github.com/entoutbox/entoutbox/codegen/testdata/versions/events"
	"github.com/entoutbox/entoutbox/events"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const testdata = "github.com/entoutbox/entoutbox/codegen/testdata"

type goldenCase struct {
	name      string
	schemaPkg string
	schemas   []ent.Interface
	events    []events.Interface
}

var cases = []goldenCase{
	{"kinds", "schema", schema.All, kinds.All},
	{"versions", "schema", schema.All, versions.All},
	{"upcast", "schema", schema.All, upcast.All},
	{"missing_upcaster", "schema", schema.All, missing_upcaster.All},
	{"duplicate_event_name", "schema", schema.All, duplicate_event_name.All},
	{"duplicate_field", "schema", schema.All, duplicate_field.All},
	{"version_numbering", "schema", schema.All, version_numbering.All},
	{"empty_name", "schema", schema.All, empty_name.All},
	{"invalid_identifier", "schema", schema.All, invalid_identifier.All},
	{"bad_default", "schema", schema.All, bad_default.All},
	{"default_maxlen", "schema", schema.All, default_maxlen.All},
	{"invalid_topic", "schema", schema.All, invalid_topic.All},
	{"removed_field", "schema", schema.All, removed_field.All},
	{"type_collision", "schema", schema.All, type_collision.All},
	{"missing_outbox", "noschema", noschema.All, missing_outbox.All},
}

// TestGolden generates each case into a temporary directory and compares
// it with testdata/<case>/ent (generated code) or testdata/<case>/stderr.txt
// (the exact refusal). A refused case runs in a package generated before,
// which must keep every file as it was. Run with -update to rewrite them.
func TestGolden(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			caseDir := filepath.Join("testdata", c.name)
			stderrFile := filepath.Join(caseDir, "stderr.txt")
			// A refusal is expected to leave a package that was generated
			// before exactly as it was, so give it one.
			_, serr := os.Stat(stderrFile)
			refusal := serr == nil && !*update
			if refusal {
				require.NoError(t, os.CopyFS(out, os.DirFS(filepath.Join("testdata", "versions", "ent"))))
			}
			before := snapshotTree(t, out)
			err := generate(t, c, out)
			if err != nil {
				requireSameTree(t, before, snapshotTree(t, out))
				if *update {
					require.NoError(t, os.WriteFile(stderrFile, []byte(err.Error()+"\n"), 0o644))
					return
				}
				want, rerr := os.ReadFile(stderrFile)
				require.NoError(t, rerr, "generation failed unexpectedly: %v", err)
				require.Equal(t, strings.TrimSuffix(string(want), "\n"), err.Error())
				return
			}
			require.NoFileExists(t, stderrFile, "generation succeeded but the case expects a refusal")
			golden := filepath.Join(caseDir, "ent")
			if *update {
				require.NoError(t, os.RemoveAll(golden))
				require.NoError(t, os.CopyFS(golden, os.DirFS(out)))
				return
			}
			compareTrees(t, golden, out)
		})
	}
}

// TestGoldenCompiles builds the committed golden packages: a golden file
// that does not compile is a broken generator.
func TestGoldenCompiles(t *testing.T) {
	args := []string{"build"}
	for _, c := range cases {
		if _, err := os.Stat(filepath.Join("testdata", c.name, "ent")); err == nil {
			args = append(args, "./testdata/"+c.name+"/ent/...")
		}
	}
	require.Greater(t, len(args), 1, "no golden package to build")
	out, err := exec.Command("go", args...).CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
}

func generate(t *testing.T, c goldenCase, target string) error {
	t.Helper()
	var schemas []*load.Schema
	for _, s := range c.schemas {
		b, err := load.MarshalSchema(s)
		require.NoError(t, err)
		ls, err := load.UnmarshalSchema(b)
		require.NoError(t, err)
		schemas = append(schemas, ls)
	}
	storage, err := gen.NewStorage("sql")
	require.NoError(t, err)
	ext := codegen.New(codegen.Events(c.events...))
	cfg := &gen.Config{
		Storage:   storage,
		Target:    target,
		Schema:    testdata + "/" + c.schemaPkg,
		Package:   testdata + "/" + c.name + "/ent",
		Hooks:     ext.Hooks(),
		Templates: ext.Templates(),
	}
	g, err := gen.NewGraph(cfg, schemas...)
	require.NoError(t, err)
	return g.Gen()
}

// TestRefusalThroughEntc refuses a generation the way go generate runs it,
// through entc.Generate, into a user's ent package generated before. ent
// stubs an existing runtime.go before loading the schema and, on an error,
// leaves the stub: the package still built but lost its runtime defaults.
func TestRefusalThroughEntc(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a schema in a module of its own")
	}
	want, err := os.ReadFile(filepath.Join("testdata", "bad_default", "stderr.txt"))
	require.NoError(t, err)
	mod := userModule(t)
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOWORK", "off")
	t.Chdir(filepath.Join(mod, "ent"))
	generateWith := func(evs ...events.Interface) error {
		return entc.Generate("./schema", &gen.Config{Package: "example.com/shop/ent"},
			entc.Extensions(codegen.New(codegen.Events(evs...))))
	}
	require.NoError(t, generateWith(versions.All...))
	runtime, err := os.ReadFile("runtime.go")
	require.NoError(t, err)
	require.Contains(t, string(runtime), "example.com/shop/ent/schema", "runtime.go must import the schema, or ent does not stub it")

	before := snapshotTree(t, mod)
	err = generateWith(bad_default.All...)
	require.Error(t, err)
	require.Equal(t, strings.TrimSuffix(string(want), "\n"), err.Error())
	requireSameTree(t, before, snapshotTree(t, mod))
}

type fileState struct {
	mode    fs.FileMode
	content string
}

// snapshotTree reads every file under root: its mode and content.
func snapshotTree(t *testing.T, root string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		m[rel] = fileState{info.Mode(), string(b)}
		return err
	}))
	return m
}

// requireSameTree fails unless a refused generation left every file as it was.
func requireSameTree(t *testing.T, before, after map[string]fileState) {
	t.Helper()
	var changes []string
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			changes = append(changes, "removed "+name)
		case a.content != b.content:
			changes = append(changes, "changed "+name+": "+firstDiff([]byte(b.content), []byte(a.content)))
		case a.mode != b.mode:
			changes = append(changes, fmt.Sprintf("changed the mode of %s from %v to %v", name, b.mode, a.mode))
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			changes = append(changes, "wrote "+name)
		}
	}
	require.Empty(t, changes, "a refused generation must leave every file as it was")
}

func compareTrees(t *testing.T, want, got string) {
	t.Helper()
	files := func(root string) map[string][]byte {
		m := map[string][]byte{}
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			b, err := os.ReadFile(p)
			m[rel] = b
			return err
		}))
		return m
	}
	w, g := files(want), files(got)
	for name, content := range g {
		wc, ok := w[name]
		if !ok {
			t.Errorf("generated %s is not in the golden files (run go test ./codegen -update)", name)
			continue
		}
		if !bytes.Equal(wc, content) {
			t.Errorf("generated %s differs from the golden file (run go test ./codegen -update): %s", name, firstDiff(wc, content))
		}
	}
	for name := range w {
		if _, ok := g[name]; !ok {
			t.Errorf("golden %s was not generated", name)
		}
	}
}

// firstDiff shows the first line where want and got part.
func firstDiff(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n\twant: %s\n\tgot:  %s", i+1, wl, gl)
		}
	}
	return "same lines, different bytes"
}
