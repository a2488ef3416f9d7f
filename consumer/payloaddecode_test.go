package consumer_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/internal/schematest"
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

// TestGeneratedReadersReadAsEncodingJSON holds the readers go generate
// writes (the checked document read into the latest version's struct,
// rather than the payload decoded a second time) to encoding/json: every
// payload made from every published schema (schematest.Variants) that a
// version accepts is decoded as that version, and the package's
// cross-check decodes it with encoding/json too and compares the structs
// (defaults set before reading, nested objects, lists, maps, nulls, raw
// JSON, base64, UUIDs, times). Each event's reader must read most of its
// latest version's payloads itself: one that declines everything would
// pass the comparison.
func TestGeneratedReadersReadAsEncodingJSON(t *testing.T) {
	t.Parallel()
	h := testent.NewOutboxHandlers(testent.NewClient()) // decoding needs no database
	schemas, latest := publishedSchemas(t)
	decoded := map[string]int64{}
	for _, s := range schemas {
		for _, p := range schematest.Variants(s.schema.Doc) {
			if !s.schema.Valid(p.JSON) {
				continue
			}
			if _, err := consumer.DecodePayload(h, s.name, s.version, p.JSON); err == nil {
				decoded[s.id]++
			}
		}
	}
	require.Zero(t, consumer.FastCheckDisagreements(), "a generated reader and encoding/json read a payload apart (see the log)")
	for _, s := range schemas {
		read, declined := consumer.GeneratedReads("entoutbox/schemas/" + s.id + ".json")
		t.Logf("%s: %d decoded, the reader read %d and left %d to encoding/json", s.id, decoded[s.id], read, declined)
		require.Positive(t, decoded[s.id], s.id)
		if s.version == latest[s.name] { // older ones may take the upcasters' road
			require.GreaterOrEqual(t, 2*read, decoded[s.id], "%s: the generated reader reads less than half the payloads", s.id)
		}
	}
}
