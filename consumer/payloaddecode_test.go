package consumer_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// TestDecodedPayloadsReadAsEncodingJSON holds the struct decode behind the
// generated check to encoding/json's meaning, on payloads the schema
// accepts whose keys are the declared ones: the decoder may be faster, but
// it must fill the struct field for field as encoding/json does (nil and
// empty slices, null, escapes, offsets, base64, exact integers, the last
// of a key given twice, undeclared keys dropped).
func TestDecodedPayloadsReadAsEncodingJSON(t *testing.T) {
	t.Parallel()
	h := testent.NewOutboxHandlers(testent.NewClient()) // decoding needs no database
	const required = `"verified":true,"score":-2147483648,"balance":1e-7,"updated_at":"2025-01-02T03:04:05.123456789+02:00",` +
		`"session_id":"0190D6A4-8C3E-7D2A-9B1F-3C4D5E6F7A8B","plan":"pro"`
	for what, payload := range map[string]string{
		"every field": `{"display_name":"a\"\\\/\u00e9\u2028\ud83d\ude00","nickname":"","deleted_at":"2024-02-29T23:59:59Z",` +
			`"avatar":"AAEC/w==","friend_ids":[9223372036854775807,-9223372036854775808,0],` +
			`"settings":{"a":[1,2.5e300,"\u00e9"],"b":null},"tags":["x","\t"],` + required + `}`,
		"nulls and empties": `{"display_name":"x","deleted_at":null,"avatar":"","friend_ids":[],` +
			`"settings":null,"tags":[],` + required + `}`,
		"a key twice": `{"display_name":"first","settings":1,"tags":["a"],"display_name":"last",` + required + `}`,
		"undeclared keys and blanks": " \n{\"extra\":{\"display_name\":1},\"display_name\":\"x\",\"settings\":\"s\",\"tags\":[]," +
			required + ",\"zzz\":[null,true]}\t ",
	} {
		var want testent.ProfileUpdated
		require.NoError(t, json.Unmarshal([]byte(payload), &want), what)
		got, err := consumer.DecodePayload(h, "profile.updated", 1, []byte(payload))
		require.NoError(t, err, what)
		require.Equal(t, &want, got, "%s: %s", what, payload)
	}
}
