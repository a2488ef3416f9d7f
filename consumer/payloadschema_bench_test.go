package consumer_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/internal/schematest"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// BenchmarkDecodePayload decodes the bench's 1 KB ProfileUpdated as the
// generated handlers do, the generated schema check included.
func BenchmarkDecodePayload(b *testing.B) {
	consumer.WithoutFastCrossCheck(b)
	h := testent.NewOutboxHandlers(testent.NewClient())
	payload := profilePayload(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := consumer.DecodePayload(h, "profile.updated", 1, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePayloadInterpreted decodes the same payload held to the
// same schema read from its file, as a contract read at run time is: the
// library checks it.
func BenchmarkDecodePayloadInterpreted(b *testing.B) {
	consumer.WithoutFastCrossCheck(b)
	s := consumer.NewPayloadSchema(os.DirFS(filepath.Join(testentContract, "..")),
		"entoutbox/schemas/profile.updated.v1.json", "profile.updated", 1)
	payload := profilePayload(b)
	b.ReportAllocs()
	for b.Loop() {
		var e testent.ProfileUpdated
		if err := s.Decode(payload, &e); err != nil {
			b.Fatal(err)
		}
	}
}

func profilePayload(b *testing.B) []byte {
	p := testent.ProfileUpdated{
		DisplayName: strings.Repeat("x", 800),
		Verified:    true,
		Score:       42,
		Balance:     12.5,
		UpdatedAt:   time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		SessionID:   uuid.MustParse("0190d6a4-8c3e-7d2a-9b1f-3c4d5e6f7a8b"),
		Plan:        "pro",
		Settings:    json.RawMessage(`{"theme":"dark","locale":"en-GB"}`),
		Tags:        []string{"bench", "outbox", "relay"},
	}
	payload, err := json.Marshal(&p)
	if err != nil {
		b.Fatal(err)
	}
	return payload
}

// BenchmarkDecodeEachEvent decodes, per event of internal/testent, the
// sample payload of its latest version's published schema (every field
// present), as the generated handlers do, check included.
func BenchmarkDecodeEachEvent(b *testing.B) {
	consumer.WithoutFastCrossCheck(b)
	h := testent.NewOutboxHandlers(testent.NewClient())
	schemas, latest := publishedSchemas(b)
	for _, s := range schemas {
		if s.version != latest[s.name] {
			continue
		}
		payload, err := json.Marshal(schematest.Sample(s.schema.Doc))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s/%dB", s.name, len(payload)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := consumer.DecodePayload(h, s.name, s.version, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
