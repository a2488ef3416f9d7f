// Package events is the declaration API of entoutbox: the types a team writes
// its versioned event schemas with, and the small runtime vocabulary
// (emit options, metadata, errors) the generated code shares with them.
//
// An event is a Go type embedding Schema:
//
//	// OrderPaid is published when payment for an order is captured.
//	type OrderPaid struct{ events.Schema }
//
//	func (OrderPaid) Name() string      { return "order.paid" } // stable wire name
//	func (OrderPaid) Topic() string     { return "orders" }     // destination topic
//	func (OrderPaid) Aggregate() string { return "Order" }
//	func (OrderPaid) Versions() []events.Version {
//		return []events.Version{
//			events.V(1, field.Int64("order_id"), field.Int64("amount_cents")),
//			events.V(2, field.Int64("order_id"), field.Int64("amount_cents"),
//				field.String("currency").Default("EUR")),
//		}
//	}
//
// The wire name is never derived from the Go type, so a type can be renamed
// without breaking consumers. Versions are numbered 1, 2, 3...; the last one
// is what producers emit.
//
// A newer version the consumers cannot fill in from an older one by
// defaults (a field removed, renamed or changed in kind, or a new required
// field without a default) needs an Upcaster on the declaration. Its fields
// are the older payload decoded with every number a json.Number, so 64-bit
// integers stay exact:
//
//	func (PriceChanged) Upcast(from int, fields map[string]any) (map[string]any, error) {
//		cents, err := fields["cents"].(json.Number).Int64()
//		if err != nil {
//			return nil, err
//		}
//		delete(fields, "cents")
//		fields["amount"] = float64(cents) / 100
//		return fields, nil
//	}
//
// Upcast alone is taken to handle the one step that needs it. Once a
// second step needs an upcaster, declare the steps Upcast handles by the
// versions it upcasts from (UpcastStepper); go generate refuses a step that
// needs an upcaster and is not listed, naming it:
//
//	func (PriceChanged) UpcastSteps() []int { return []int{2, 3} } // 2 -> 3 and 3 -> 4
//
// go generate records the wire shape of every version in the ent
// package's entoutbox.lock.json (commit it) and from then on refuses a
// change to a released version; declare the change as a new version. While
// a version is not released yet, mark it a draft and its shape may change:
//
//	events.V(3, field.Int64("order_id"), field.String("note").Optional()).Draft()
//
// Remove Draft to release it. The rules table of docs/reference.md says which changes
// between consecutive versions are backward or forward compatible, which
// need an Upcaster and which are refused.
//
// Its errors start with "events: "; a *ValidationError names the event and
// version, and the field at fault when there is one.
//
// This package stays tiny and free of code-generation dependencies: the
// generated ent code imports it at run time.
package events
