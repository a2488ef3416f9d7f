package codegen

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The generated check knows every keyword it checks; a schema with one it
// does not know fails generation, naming it, instead of going unchecked.
func TestPayloadCheckRefusesUnknownKeywords(t *testing.T) {
	for keyword, value := range map[string]any{
		"multipleOf": json.Number("2"), "minItems": json.Number("1"), "uniqueItems": true,
		"patternProperties": map[string]any{}, "anyOf": []any{}, "$ref": "#/x",
	} {
		g := newCheckGen()
		s := map[string]any{"type": "object", "properties": map[string]any{
			"a": map[string]any{"type": "integer", keyword: value}}}
		_, err := g.node("outboxCheckXV1", "x v1", s)
		require.EqualError(t, err, `x v1.a: the generated check does not know keyword "`+keyword+`"`)
	}
	// Annotations check nothing: a node of annotations alone takes any value.
	g := newCheckGen()
	check, err := g.node("outboxCheckXV1", "x v1", map[string]any{"description": "any JSON value", "default": 1})
	require.NoError(t, err)
	require.Equal(t, "nil", check)
	// A format it does not know is refused too.
	_, err = g.node("outboxCheckYV1", "y v1", map[string]any{"type": "string", "format": "email"})
	require.True(t, err != nil && strings.Contains(err.Error(), `format email`), "%v", err)
}
