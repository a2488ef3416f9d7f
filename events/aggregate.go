package events

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/google/uuid"
)

// AggregateID is an aggregate id as the generated Emit methods take it, the
// way ent hands out ids: a string, an integer (int, int64, uint32...), a
// UUID (uuid.UUID, or any other [16]byte type), or a named type of one of
// those kinds (type OrderID int64). Each is written as text
// (FormatAggregateID): integers in decimal, UUIDs in their canonical form,
// strings as they are; so 42 and "42" are the same aggregate. Any other
// type is refused with an error naming it.
type AggregateID = any

// FormatAggregateID returns id as the outbox stores it (see AggregateID), or
// an error naming id's Go type when it is none of the kinds an aggregate id
// may be. The limits of CheckAggregateID apply to the result.
func FormatAggregateID(id AggregateID) (string, error) {
	switch id := id.(type) { // the usual types, without reflection
	case string:
		return id, nil
	case int:
		return strconv.Itoa(id), nil
	case int64:
		return strconv.FormatInt(id, 10), nil
	case uuid.UUID:
		return id.String(), nil
	case nil:
		return "", fmt.Errorf("events: aggregate id is nil: want a string, an integer or a UUID")
	}
	v := reflect.ValueOf(id)
	switch v.Kind() {
	case reflect.String:
		return v.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10), nil
	case reflect.Array:
		if v.Len() == 16 && v.Type().Elem().Kind() == reflect.Uint8 {
			var b [16]byte
			reflect.Copy(reflect.ValueOf(&b).Elem(), v)
			return uuid.UUID(b).String(), nil // the canonical form
		}
	}
	return "", fmt.Errorf("events: aggregate id of type %T: want a string, an integer or a UUID (or a type of one of those kinds)", id)
}
