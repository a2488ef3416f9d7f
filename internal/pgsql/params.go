package pgsql

import (
	"slices"
	"strconv"
)

// Params numbers the parameters of a statement being written by name: the
// first Ref of a name takes the next $n, every later one the same. The
// statement's text and its argument order then come from one place, and
// no number is counted by hand.
type Params[N comparable] struct {
	names []N
}

// Ref is the placeholder of name: $1, $2, ...
func (p *Params[N]) Ref(name N) string {
	i := slices.Index(p.names, name)
	if i < 0 {
		p.names = append(p.names, name)
		i = len(p.names) - 1
	}
	return "$" + strconv.Itoa(i+1)
}

// Names is the parameters in the order of their numbers.
func (p *Params[N]) Names() []N { return slices.Clone(p.names) }
