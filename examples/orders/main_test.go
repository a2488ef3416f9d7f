package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/internal/pgtest"
)

func TestExampleRunsEndToEnd(t *testing.T) {
	db := pgtest.New(t) // reachability check and a schema name of our own
	var out bytes.Buffer
	err := Run(context.Background(), &out, Config{DatabaseURL: pgtest.ServerURL(), Schema: db.Schema + "_ex", Orders: 3})
	t.Cleanup(func() { _, _ = db.DB.Exec(`DROP SCHEMA IF EXISTS "` + db.Schema + `_ex" CASCADE`) })
	require.NoError(t, err)
	got := out.String()
	t.Log(got)
	require.Contains(t, got, "rolled back: customer-declined")
	require.Contains(t, got, `refused: entoutbox: invalid "order.paid" v2 payload: field "currency" value "JPY" is not one of [EUR USD GBP]`)
	require.Contains(t, got, "outbox holds 3 events:")
	for _, id := range []string{"Order/1 ", "Order/2 ", "Order/3 "} {
		require.Contains(t, got, "order.paid v2 "+id)
	}
	require.NotContains(t, got, "Order/4 ", "the rolled-back order's event must not be in the outbox")
}

// The application binary must not carry the code generator.
func TestBinaryDoesNotCarryTheGenerator(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotEqual(t, "entgo.io/ent/entc/gen", dep)
		require.False(t, strings.HasPrefix(dep, "golang.org/x/tools"), "imports %s", dep)
		require.NotEqual(t, "github.com/entoutbox/entoutbox/codegen", dep)
	}
}
