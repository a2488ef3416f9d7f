// Package events declares a field that version 2 removed and version 3
// brings back with another kind (rule FIELD_NAME_REUSE), upcaster or not.
package events

import (
	"github.com/entoutbox/entoutbox/events"
	"github.com/entoutbox/entoutbox/events/field"
)

type CouponUsed struct{ events.Schema }

func (CouponUsed) Name() string      { return "coupon.used" }
func (CouponUsed) Topic() string     { return "coupons" }
func (CouponUsed) Aggregate() string { return "Coupon" }
func (CouponUsed) Versions() []events.Version {
	return []events.Version{
		events.V(1, field.Int64("id"), field.String("code")),
		events.V(2, field.Int64("id")),
		events.V(3, field.Int64("id"), field.Int64("code")),
	}
}

// Upcast would fill the steps in; the reused name is refused anyway.
func (CouponUsed) Upcast(from int, fields map[string]any) (map[string]any, error) {
	return fields, nil
}

func (CouponUsed) UpcastSteps() []int { return []int{1, 2} }

var All = []events.Interface{CouponUsed{}}
