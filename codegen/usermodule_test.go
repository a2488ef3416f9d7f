package codegen_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUserModuleImportsEnt generates the ent package of a module shaped like a
// user's, which depends on this one through a replace and holds other packages
// named ent (ours, and one of its own). ent's client.go leaves entgo.io/ent to
// goimports; unless the extension names it, goimports may resolve "ent" to
// whichever of those packages it finds first.
func TestUserModuleImportsEnt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go generate in a module of its own")
	}
	mod := userModule(t)

	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}
	run(filepath.Join(mod, "ent"), "run", "entc.go")

	client, err := os.ReadFile(filepath.Join(mod, "ent", "client.go"))
	require.NoError(t, err)
	imports := regexp.MustCompile(`(?s)\nimport \((.*?)\n\)`).FindSubmatch(client)
	require.NotNil(t, imports, "client.go has no import block")
	var paths []string
	for _, line := range strings.Split(string(imports[1]), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			paths = append(paths, line)
		}
	}
	require.Contains(t, paths, `"entgo.io/ent"`, "client.go must import entgo.io/ent")
	require.NotContains(t, paths, `"github.com/entoutbox/entoutbox/ent"`, "client.go imports our ent package")
	require.NotContains(t, paths, `"example.com/shop/reports/ent"`, "client.go imports the module's other ent package")

	run(mod, "build", "./...")
}

// userModule writes testdata/usermodule into a temporary module that
// depends on this repository through a replace, and returns its directory.
func userModule(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	mod := t.TempDir()
	src := filepath.Join("testdata", "usermodule")
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go.txt") {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(mod, strings.TrimSuffix(rel, ".txt"))
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		return os.WriteFile(dst, b, 0o644)
	}))

	// The same requirements as this module, so that nothing new is fetched.
	ours, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	require.NoError(t, err)
	gomod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(ours), "module example.com/shop") +
		"\nrequire github.com/entoutbox/entoutbox v0.0.0\n\nreplace github.com/entoutbox/entoutbox => " + repo + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))

	return mod
}
