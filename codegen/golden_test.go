package codegen_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"entgo.io/ent"
	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
	"entgo.io/ent/entc/load"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/codegen"
	"github.com/entoutbox/entoutbox/events"
)

// The golden cases are the directories of testdata/, found as sqlc's
// endtoend tests find theirs, except that a case's declarations are Go
// values, which must be imported: gencases writes the imports and the list
// into cases_gen_test.go, and TestGoldenCasesMatchTestdata fails when it is
// out of date. A directory testdata/<case> is a case when it holds
//
//   - events/, a package whose All lists the declarations (without it the
//     case declares none), or stderr.txt, or both;
//   - stderr.txt: generation must be refused with exactly this message
//     (one line break at the end aside), leaving every file as it was;
//   - otherwise ent/: the files the extension generates (those headed
//     codegen's generated-code line, and the lock entoutbox.lock.json), not
//     ent's own, compared byte for byte;
//   - lock.json, optionally: the lock of an earlier generation, copied into
//     the package as entoutbox.lock.json before generating (over the one of
//     case versions in a refused case), for the rules of the lock; a
//     refused case without it generates without a lock, so that the events
//     of case versions it does not declare are not refused as gone;
//   - schema.txt, optionally: the directory under testdata/ of the ent
//     schema package (its All) to generate with, "schema" when absent.
//
// Other directories are the schema packages and usermodule/ (see its
// README). go test ./codegen -update rewrites stderr.txt and ent/.
//
//go:generate go run ./internal/gencases

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const testdata = "github.com/entoutbox/entoutbox/codegen/testdata"

type goldenCase struct {
	name      string
	schemaPkg string
	schemas   []ent.Interface
	events    []events.Interface
}

// TestGoldenCasesMatchTestdata fails when a directory of testdata/ was
// added, removed or changed into another kind of case without running go
// generate ./codegen.
func TestGoldenCasesMatchTestdata(t *testing.T) {
	type found struct {
		name, schemaPkg string
		events          bool
	}
	var want, got []found
	schemas := map[string]bool{}
	for _, c := range cases {
		got = append(got, found{c.name, c.schemaPkg, c.events != nil})
		schemas[c.schemaPkg] = true
	}
	entries, err := os.ReadDir("testdata")
	require.NoError(t, err)
	var other []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join("testdata", e.Name())
		f := found{name: e.Name(), schemaPkg: "schema", events: isDir(filepath.Join(dir, "events"))}
		if _, err := os.Stat(filepath.Join(dir, "stderr.txt")); err != nil && !f.events {
			other = append(other, e.Name())
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "schema.txt")); err == nil {
			f.schemaPkg = strings.TrimSpace(string(b))
		}
		want = append(want, f)
	}
	require.Equal(t, want, got, "testdata/ and cases_gen_test.go disagree: run go generate ./codegen")
	for _, name := range other {
		require.True(t, schemas[name] || name == "usermodule" || name == asyncAPIParserDir,
			"testdata/%s is no case (it has neither events/ nor stderr.txt) nor a schema package a case uses", name)
	}
}

// TestGolden generates each case into a temporary directory and compares
// the extension's files with testdata/<case>/ent, or the refusal with
// testdata/<case>/stderr.txt. A refused case runs in a package generated
// before (by case versions), which must keep every file as it was.
func TestGolden(t *testing.T) {
	before := generatedCase(t, caseNamed(t, "versions"))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			caseDir := filepath.Join("testdata", c.name)
			stderrFile := filepath.Join(caseDir, "stderr.txt")
			if _, err := os.Stat(stderrFile); err == nil {
				require.NoError(t, os.CopyFS(out, os.DirFS(before)))
				require.NoError(t, os.Remove(filepath.Join(out, codegen.LockFile)))
			}
			if lock, err := os.ReadFile(filepath.Join(caseDir, "lock.json")); err == nil {
				require.NoError(t, os.WriteFile(filepath.Join(out, codegen.LockFile), lock, 0o644))
			}
			if !*update && !fileExists(stderrFile) && !fileExists(filepath.Join(caseDir, "lock.json")) {
				// Generated from nothing: the output the other tests read.
				compareFiles(t, readTree(t, filepath.Join(caseDir, "ent")), ownFiles(t, generatedCase(t, c)))
				return
			}
			snapshot := snapshotTree(t, out)
			err := generate(t, c, out)
			if err != nil {
				requireSameTree(t, snapshot, snapshotTree(t, out))
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
			got := ownFiles(t, out)
			golden := filepath.Join(caseDir, "ent")
			if *update {
				require.NoError(t, os.RemoveAll(golden))
				for name, content := range got {
					require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(golden, name)), 0o755))
					require.NoError(t, os.WriteFile(filepath.Join(golden, name), content, 0o644))
				}
				return
			}
			compareFiles(t, readTree(t, golden), got)
		})
	}
}

// ownFiles reads the files the extension generated under root: those
// headed with its generated-code line, and the lock. Each is named
// entoutbox_*.go, apart from ent's files.
func ownFiles(t *testing.T, root string) map[string][]byte {
	t.Helper()
	own := map[string][]byte{}
	for name, content := range readTree(t, root) {
		if bytes.HasPrefix(content, []byte(codegen.Header+"\n")) {
			own[name] = content
		}
	}
	lock, hasLock := readTree(t, root)[codegen.LockFile]
	for name := range own {
		require.True(t, strings.HasPrefix(filepath.Base(name), "entoutbox_"), "the extension wrote %s, which is not named entoutbox_*", name)
	}
	require.NotEmpty(t, own, "the extension generated no file")
	if hasLock {
		own[codegen.LockFile] = lock
	}
	return own
}

// TestGeneratedCompiles builds the whole package each successful case
// generates, ent's files with the extension's: golden files that do not
// compile are a broken generator. go build reads the temporary outputs
// through an overlay, at the import path they were generated for. It is
// the package's longest test (the compiler's work, half a minute of CPU
// when the build cache is cold): -short leaves it out. Without inlining
// (-l), which decides nothing about whether the code compiles, the build
// takes 40% less CPU.
func TestGeneratedCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the ent package of every golden case")
	}
	abs, err := filepath.Abs("testdata")
	require.NoError(t, err)
	overlay := map[string]string{}
	args := []string{"build", "-gcflags=./testdata/...=-l"}
	for _, c := range cases {
		if _, err := os.Stat(filepath.Join("testdata", c.name, "stderr.txt")); err == nil {
			continue
		}
		out := generatedCase(t, c)
		dst := filepath.Join(abs, c.name, "ent")
		// The golden files in the repository are replaced, or hidden when
		// they were not generated.
		for name := range readTree(t, dst) {
			overlay[filepath.Join(dst, name)] = ""
		}
		for name := range readTree(t, out) {
			overlay[filepath.Join(dst, name)] = filepath.Join(out, name)
		}
		args = append(args, "./testdata/"+c.name+"/ent/...")
	}
	require.Greater(t, len(args), 1, "no case generates a package")
	b, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "overlay.json")
	require.NoError(t, os.WriteFile(file, b, 0o644))
	args = slices.Insert(args, 2, "-overlay="+file)
	out, err := exec.Command("go", args...).CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
}

// generated holds the output of each case that generation accepts,
// generated from nothing once per test binary into a directory under root:
// the tests that only read a case's files (TestGolden, its build, its
// contract) share it. A generation runs ent's templates and goimports; it
// was most of the package's time when each test generated every case
// again.
var generated struct {
	sync.Mutex
	root string
	dirs map[string]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if generated.root != "" {
		_ = os.RemoveAll(generated.root)
	}
	os.Exit(code)
}

// generatedCase returns the directory c was generated into from nothing;
// its files must not be changed.
func generatedCase(t *testing.T, c goldenCase) string {
	t.Helper()
	generated.Lock()
	defer generated.Unlock()
	if dir, ok := generated.dirs[c.name]; ok {
		return dir
	}
	if generated.root == "" {
		root, err := os.MkdirTemp("", "codegen-cases-")
		require.NoError(t, err)
		generated.root, generated.dirs = root, map[string]string{}
	}
	dir := filepath.Join(generated.root, c.name)
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, generate(t, c, dir), "case %s", c.name)
	generated.dirs[c.name] = dir
	return dir
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func generate(t *testing.T, c goldenCase, target string, opts ...codegen.Option) error {
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
	ext := codegen.NewExtension(append([]codegen.Option{codegen.Events(c.events...)}, opts...)...)
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

func caseNamed(t *testing.T, name string) goldenCase {
	t.Helper()
	for _, c := range cases {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no golden case %q", name)
	return goldenCase{}
}

func isDir(p string) bool { fi, err := os.Stat(p); return err == nil && fi.IsDir() }

// TestRefusalThroughEntc refuses a generation the way go generate runs it,
// through entc.Generate, into a user's ent package generated before: a bad
// declaration, and an edit of a version its lock holds as released. ent
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
			entc.Extensions(codegen.NewExtension(codegen.Events(evs...))))
	}
	require.NoError(t, generateWith(caseNamed(t, "versions").events...))
	runtime, err := os.ReadFile("runtime.go")
	require.NoError(t, err)
	require.Contains(t, string(runtime), "example.com/shop/ent/schema", "runtime.go must import the schema, or ent does not stub it")

	before := snapshotTree(t, mod)
	err = generateWith(caseNamed(t, "bad_default").events...)
	require.Error(t, err)
	require.Equal(t, strings.TrimSuffix(string(want), "\n"), err.Error())
	requireSameTree(t, before, snapshotTree(t, mod))

	// The lock the first generation wrote holds version 1 of order.paid:
	// an edit of it is refused the same way, the lock kept as it was.
	require.FileExists(t, codegen.LockFile)
	err = generateWith(caseNamed(t, "rule_version_frozen").events...)
	require.ErrorContains(t, err, `event OrderPaid ("order.paid") version 1, field "amount_cents": kind changed from int64 to string, but version 1 is released in entoutbox.lock.json`)
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

// readTree reads every file under root, by path relative to it; a root
// that does not exist holds none.
func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	if _, err := os.Stat(root); os.IsNotExist(err) {
		return m
	}
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

func compareFiles(t *testing.T, want, got map[string][]byte) {
	t.Helper()
	for name, content := range got {
		wc, ok := want[name]
		if !ok {
			t.Errorf("generated %s is not in the golden files (run go test ./codegen -update)", name)
			continue
		}
		if !bytes.Equal(wc, content) {
			t.Errorf("generated %s differs from the golden file (run go test ./codegen -update): %s", name, firstDiff(wc, content))
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
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
