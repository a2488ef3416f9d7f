// Package events declares events that may be scheduled as far ahead as
// the default allows, as far as their declaration says, or never.
package events

import (
	"time"

	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

// PaymentReminder may wait two days.
type PaymentReminder struct{ events.Schema }

func (PaymentReminder) Name() string            { return "payment.reminder" }
func (PaymentReminder) Topic() string           { return "reminders" }
func (PaymentReminder) Aggregate() string       { return "Order" }
func (PaymentReminder) MaxDelay() time.Duration { return 48 * time.Hour }
func (PaymentReminder) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"))}
}

// HoldExpired may wait a day and a half, not a whole number of hours.
type HoldExpired struct{ events.Schema }

func (HoldExpired) Name() string      { return "hold.expired" }
func (HoldExpired) Topic() string     { return "holds" }
func (HoldExpired) Aggregate() string { return "Hold" }
func (HoldExpired) MaxDelay() time.Duration {
	return 36*time.Hour + 30*time.Minute + 500*time.Millisecond
}
func (HoldExpired) Versions() []events.Version {
	return []events.Version{events.V(1, field.String("hold_id"))}
}

// OrderPlaced keeps the default: up to 366 days.
type OrderPlaced struct{ events.Schema }

func (OrderPlaced) Name() string      { return "order.placed" }
func (OrderPlaced) Topic() string     { return "orders" }
func (OrderPlaced) Aggregate() string { return "Order" }
func (OrderPlaced) Versions() []events.Version {
	return []events.Version{events.V(1, field.Int64("order_id"))}
}

// AuditRecorded is never scheduled.
type AuditRecorded struct{ events.Schema }

func (AuditRecorded) Name() string            { return "audit.recorded" }
func (AuditRecorded) Topic() string           { return "audits" }
func (AuditRecorded) Aggregate() string       { return "Account" }
func (AuditRecorded) MaxDelay() time.Duration { return 0 }
func (AuditRecorded) Versions() []events.Version {
	return []events.Version{events.V(1, field.String("action"))}
}

// LedgerClosed says never with a negative delay.
type LedgerClosed struct{ events.Schema }

func (LedgerClosed) Name() string            { return "ledger.closed" }
func (LedgerClosed) Topic() string           { return "audits" }
func (LedgerClosed) Aggregate() string       { return "Account" }
func (LedgerClosed) MaxDelay() time.Duration { return -time.Second }
func (LedgerClosed) Versions() []events.Version {
	return []events.Version{events.V(1, field.String("ledger"))}
}

// All lists the declarations of this case.
var All = []events.Interface{PaymentReminder{}, HoldExpired{}, OrderPlaced{}, AuditRecorded{}, LedgerClosed{}}
