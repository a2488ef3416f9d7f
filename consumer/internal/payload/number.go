package payload

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
)

// A bound is a minimum or maximum, with what compares it to an int64
// without big.Rat.
type bound struct {
	rat   *big.Rat
	floor int64 // floor(rat) unless sat is set
	frac  bool  // rat is not an integer
	sat   int   // 1: rat is above every int64; -1: below every int64
}

var (
	minInt64 = new(big.Rat).SetInt64(-1 << 63)
	maxInt64 = new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 63)) // 2^63, above every int64
)

func newBound(r *big.Rat) *bound {
	if r == nil {
		return nil
	}
	b := &bound{rat: r}
	switch {
	case r.Cmp(maxInt64) >= 0:
		b.sat = 1
	case r.Cmp(minInt64) < 0:
		b.sat = -1
	default:
		q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int)) // Euclidean: the floor, the denominator being positive
		b.floor, b.frac = q.Int64(), m.Sign() != 0
	}
	return b
}

// A number is a JSON number: when written without exponent and with at
// most 18 digits before its point, its floor and whether it has a fraction,
// which compare it with most bounds; else (or to compare fractions) as
// the library reads it, a big.Rat.
type number struct {
	s       json.Number
	simple  bool
	floor   int64
	frac    bool
	rat     *big.Rat
	invalid bool
}

func parseNumber(s json.Number) (number, bool) {
	x := number{s: s}
	str := string(s)
	if strings.ContainsAny(str, "eE") {
		return x, x.big() != nil
	}
	intPart, fracPart, _ := strings.Cut(str, ".")
	neg := strings.HasPrefix(intPart, "-")
	if len(strings.TrimPrefix(intPart, "-")) > 18 {
		return x, x.big() != nil
	}
	n, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil {
		return x, x.big() != nil
	}
	x.simple, x.floor = true, n
	x.frac = strings.Trim(fracPart, "0") != ""
	if neg && x.frac {
		x.floor-- // -12.5 lies between -13 and -12
	}
	return x, true
}

// big is the number as the library reads it.
func (x *number) big() *big.Rat {
	if x.rat == nil && !x.invalid {
		r, ok := new(big.Rat).SetString(string(x.s))
		if ok {
			x.rat = r
		} else {
			x.invalid = true
		}
	}
	return x.rat
}

func (x *number) isInt() bool {
	if x.simple {
		return !x.frac
	}
	return x.big().IsInt()
}

// cmp compares the number with b as big.Rat.Cmp does.
func (x *number) cmp(b *bound) int {
	if x.simple {
		switch {
		case b.sat != 0:
			return -b.sat
		case x.floor < b.floor:
			return -1
		case x.floor > b.floor:
			return 1
		case !x.frac && !b.frac:
			return 0
		case !x.frac:
			return -1
		case !b.frac:
			return 1
		}
	}
	return x.big().Cmp(b.rat)
}
