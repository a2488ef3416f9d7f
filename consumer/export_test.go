package consumer

import (
	"reflect"
	"unsafe"
)

// PendingInBatches is how many events wait for a batch in the handler set
// of h, generated handlers (their unexported field set): a test holds a
// batch and waits for the others to queue behind it.
func PendingInBatches(h any) int {
	s := (*Set)(unsafe.Pointer(reflect.ValueOf(h).Elem().FieldByName("set").Pointer()))
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.pending)
}
