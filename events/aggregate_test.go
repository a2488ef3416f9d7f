package events_test

import (
	"math"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/events"
)

type (
	orderID   int64
	sku       string
	shortID   uint16
	otherUUID [16]byte // a UUID type of another library (gofrs/uuid's is one)
)

func TestFormatAggregateIDTakesTheIDsEntHandsOut(t *testing.T) {
	t.Parallel()
	u := uuid.MustParse("0190a3c2-7b1e-7000-8000-00000000002a")
	for _, tc := range []struct {
		id   events.AggregateID
		want string
	}{
		{"order-1", "order-1"},
		{42, "42"},
		{int64(-7), "-7"},
		{int8(5), "5"},
		{int32(math.MaxInt32), "2147483647"},
		{uint(3), "3"},
		{uint64(math.MaxUint64), "18446744073709551615"},
		{u, "0190a3c2-7b1e-7000-8000-00000000002a"},
		{orderID(42), "42"},
		{sku("tea"), "tea"},
		{shortID(9), "9"},
		{otherUUID(u), "0190a3c2-7b1e-7000-8000-00000000002a"},
		{"", ""}, // CheckAggregateID refuses it, as before
	} {
		got, err := events.FormatAggregateID(tc.id)
		require.NoError(t, err, "%T", tc.id)
		require.Equal(t, tc.want, got, "%T", tc.id)
	}
}

func TestFormatAggregateIDNamesATypeItDoesNotTake(t *testing.T) {
	t.Parallel()
	n := 1
	for _, tc := range []struct {
		id  events.AggregateID
		typ string
	}{
		{1.5, "float64"},
		{&n, "*int"},
		{[]byte("1"), "[]uint8"},
		{[2]byte{}, "[2]uint8"},
		{[16]int{}, "[16]int"},
		{&uuid.UUID{}, "*uuid.UUID"},
		{true, "bool"},
		{uintptr(1), "uintptr"},
		{struct{}{}, "struct {}"},
	} {
		_, err := events.FormatAggregateID(tc.id)
		require.EqualError(t, err, "events: aggregate id of type "+tc.typ+
			": want a string, an integer or a UUID (or a type of one of those kinds)")
	}
	_, err := events.FormatAggregateID(nil)
	require.EqualError(t, err, "events: aggregate id is nil: want a string, an integer or a UUID")
}
