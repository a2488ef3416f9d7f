package payload

import (
	"bytes"
	"encoding/json"
	"math/big"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

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
