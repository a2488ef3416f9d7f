package consumer_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/entoutbox/entoutbox/consumer"
	"github.com/entoutbox/entoutbox/internal/testent"
)

// BenchmarkDecodePayload decodes the bench's 1 KB ProfileUpdated as the
// generated handlers do, schema check included.
func BenchmarkDecodePayload(b *testing.B) {
	consumer.WithoutFastCrossCheck(b)
	h := testent.NewOutboxHandlers(testent.NewClient())
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
	b.ReportAllocs()
	for b.Loop() {
		if _, err := consumer.DecodePayload(h, "profile.updated", 1, payload); err != nil {
			b.Fatal(err)
		}
	}
}
