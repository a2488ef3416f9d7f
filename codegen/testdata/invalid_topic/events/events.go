// Package events declares topics that not every broker takes as a literal
// name.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// event is a declaration whose topic is the only thing that differs.
type event struct {
	events.Schema
	name, topic string
}

func (e event) Name() string    { return e.name }
func (e event) Topic() string   { return e.topic }
func (event) Aggregate() string { return "Order" }
func (event) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"))}
}

type OrderPaid struct{ event }
type OrderShipped struct{ event }
type OrderRefunded struct{ event }
type OrderCancelled struct{ event }
type OrderArchived struct{ event }
type OrderNoted struct{ event }
type OrderClosed struct{ event }
type OrderSplit struct{ event }
type OrderMerged struct{ event }

var All = []events.Interface{
	OrderPaid{event{name: "order.paid", topic: "orders.>"}},                                               // a NATS wildcard
	OrderShipped{event{name: "order.shipped", topic: "orders..shipped"}},                                  // an empty NATS token
	OrderRefunded{event{name: "order.refunded", topic: "_INBOX.orders"}},                                  // NATS replies
	OrderCancelled{event{name: "order.cancelled", topic: "amq.orders"}},                                   // RabbitMQ's own
	OrderArchived{event{name: "order.archived", topic: "orders.archived.in.the.warehouse.of.north-east"}}, // too long for PostgreSQL
	OrderNoted{event{name: "order.noted", topic: "$SYS.orders"}},                                          // a NATS system subject
	OrderClosed{event{name: "order.closed", topic: "__orders"}},                                           // Kafka's internal topics
	OrderSplit{event{name: "order.split", topic: "orders."}},                                              // a trailing dot
	OrderMerged{event{name: "order.merged", topic: "orders eu"}},                                          // white space
}
