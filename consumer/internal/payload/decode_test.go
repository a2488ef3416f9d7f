package payload

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// Raw hands a key's value over as encoding/json hands it to a
// json.RawMessage field, whatever precedes it in the object.
func TestRawReadsAsEncodingJSON(t *testing.T) {
	for _, payload := range []string{
		`{"v":{"a":[1,{"b":"}"}]}}`,
		` { "x" : "a\"b\\" , "y":[ "]" ,{}], "v" :  [ 1 , 2 ]  , "z":null} `,
		`{"x":"\\\\","v":"\u00e9\"","w":1}`,
		`{"x":{"v":1},"v":null}`,
		`{"x":-1.5e3,"v":true}`,
		"{\n\t\"v\"\n:\n\"s\"\n}",
	} {
		var want struct {
			V json.RawMessage `json:"v"`
		}
		require.NoError(t, json.Unmarshal([]byte(payload), &want), payload)
		got, ok := Raw([]byte(payload), "v")
		require.True(t, ok, payload)
		require.Equal(t, string(want.V), string(got), payload)
	}
	for _, payload := range []string{`{}`, `{"x":{"v":1}}`, `{"x":"\"v\":1"}`, `{"V":1}`, `[{"v":1}]`} {
		_, ok := Raw([]byte(payload), "v")
		require.False(t, ok, payload)
	}
}

// KeyFolds says yes to every key encoding/json might match to a field
// regardless of case.
func TestKeyFoldsCatchesWhatEncodingJSONMatches(t *testing.T) {
	for _, key := range []string{"Amount", "AMOUNT", "amounT", "\u212amount"} { // U+212A KELVIN SIGN folds to k
		var v struct {
			Amount  int `json:"amount"`
			Kmount  int `json:"kmount"`
			OrderID int `json:"order_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(`{"`+key+`":1}`), &v))
		require.True(t, v.Amount == 1 || v.Kmount == 1, key)
		require.True(t, KeyFolds(key, "amount", "kmount", "order_id"), key)
	}
	require.True(t, KeyFolds("OrderID", "amount", "order_id"))
	require.False(t, KeyFolds("total", "amount", "order_id"))
}
