package payload

import (
	"bytes"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// The fast check covers every schema internal/testent publishes (its
// kinds are every kind go generate writes), so the package's tests, which
// cross-check it with the library on every payload, hold it to the
// library.
func TestFastCheckCoversThePublishedSchemas(t *testing.T) {
	dir := "../../../internal/testent/entoutbox"
	files, err := filepath.Glob(filepath.Join(dir, "schemas", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		rel, err := filepath.Rel(dir, f)
		require.NoError(t, err)
		sch, err := compileSchema(os.DirFS(dir), filepath.ToSlash(rel))
		require.NoError(t, err)
		require.NotNil(t, compileFast(sch), "%s: the fast check does not cover it", rel)
	}
}

// compileFast decides, for each field of jsonschema.Schema, whether the
// fast check handles it or leaves the schema to the library: a field a
// later version of the library adds must be looked at there.
func TestFastCheckKnowsEverySchemaField(t *testing.T) {
	known := []string{
		// handled
		"DraftVersion", "Bool", "Types", "Enum", "Const", "Not", "Format", "Required", "Properties",
		"AdditionalProperties", "Items2020", "MinLength", "MaxLength", "Pattern",
		"Maximum", "Minimum", "ExclusiveMaximum", "ExclusiveMinimum",
		// left to the library (unhandled)
		"Ref", "RecursiveRef", "DynamicRef", "AllOf", "AnyOf", "OneOf", "If", "Then", "Else",
		"MaxProperties", "MinProperties", "PropertyNames", "PatternProperties", "Dependencies",
		"DependentRequired", "DependentSchemas", "UnevaluatedProperties", "MinItems", "MaxItems",
		"UniqueItems", "Contains", "MinContains", "MaxContains", "Items", "AdditionalItems",
		"PrefixItems", "UnevaluatedItems", "ContentEncoding", "ContentMediaType", "ContentSchema",
		"MultipleOf", "Extensions",
		// no effect on validation, or only through a reference
		"Location", "ID", "Anchor", "RecursiveAnchor", "DynamicAnchor", "Title", "Description",
		"Default", "Comment", "ReadOnly", "WriteOnly", "Examples", "Deprecated",
	}
	typ := reflect.TypeFor[jsonschema.Schema]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.IsExported() {
			require.True(t, slices.Contains(known, f.Name), "jsonschema.Schema.%s is new: handle it in compileFast or unhandled", f.Name)
		}
	}
}

// parseFast reads what it reads as encoding/json does, and leaves the rest
// to it.
func TestParseFastReadsAsEncodingJSON(t *testing.T) {
	read := []string{
		`{}`, `[]`, ` {"a" : [1, -0, 0.5, -12.50, 1e3, 1E-3, 2e+2, true, false, null, "x"] } `, `"é"`, `0`,
		`{"a":1,"a":{"b":2}}`, `[[],[{}]]`, "\t\r\n[1]\n", `{"":""}`, "\"\x7f\"",
	}
	left := []string{
		``, ` `, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{} {}`, `{}x`, `01`, `-`, `1.`, `.5`,
		`1e`, `+1`, `tru`, `truex`, `nul`, `"\n"`, `"a\"b"`, `"\u007f"`, "\"\x01\"", "\"\xff\"", "\xef\xbb\xbf{}", `NaN`,
		`{1:2}`, `{"a" 1}`, `[` + string(bytes.Repeat([]byte("["), 200)),
	}
	for _, s := range read {
		doc, keys, ok := parseFast([]byte(s))
		require.True(t, ok, s)
		lib, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(s)))
		require.NoError(t, err, s)
		require.Equal(t, lib, doc, s)
		require.Equal(t, keysWritten([]byte(s)), keys, s)
	}
	for _, s := range left {
		_, _, ok := parseFast([]byte(s))
		require.False(t, ok, s)
	}
}

// A number compares with a bound as big.Rat does.
func TestNumberComparesAsBigRat(t *testing.T) {
	numbers := []string{"0", "-0", "1", "-1", "12.5", "-12.5", "12.0", "-12.0", "0.5", "-0.5", "150", "150.0000001",
		"149.9999", "-1000.5", "-1000.49", "-1000.51", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "999999999999999999.5", "-999999999999999999.5", "1e3", "1.5e1", "-2E-1",
		"2147483647", "2147483648", "-2147483649", "1.7976931348623157e+308", "1e400"}
	bounds := []string{"0", "150", "-1000.5", "1", "12.5", "-12.5", "2147483647", "-2147483648",
		"9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
		"1.7976931348623157e+308", "-1.7976931348623157e+308", "0.25", "-0.25"}
	for _, ns := range numbers {
		x, ok := parseNumber(json.Number(ns))
		require.True(t, ok, ns)
		want, _ := new(big.Rat).SetString(ns)
		require.Equal(t, want.IsInt(), x.isInt(), ns)
		for _, bs := range bounds {
			r, _ := new(big.Rat).SetString(bs)
			require.Equal(t, want.Cmp(r), x.cmp(newBound(r)), "%s against %s", ns, bs)
		}
	}
}
