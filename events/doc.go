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
// This package stays tiny and free of code-generation dependencies: the
// generated ent code imports it at run time.
package events
