package outboxdb

import (
	"context"
	"database/sql"
	"strconv"
	"sync"

	"entgo.io/ent/dialect"
)

// The statements' forms for SQLite and MySQL are written with numbered
// parameters (?1, ?2, …), which SQLite reads and MySQL does not: MySQL
// takes each ? in order. Bind turns a MySQL form into what MySQL reads,
// with its arguments repeated and ordered as the numbers ask. Forms that
// are built with their arguments in order (Emit's) use plain ? and pass
// through unchanged.

// Bind is query, a statement's text in dialect d, with args bound the way
// d reads them.
func Bind(d Dialect, query string, args []any) (string, []any) {
	if d != MySQL {
		return query, args
	}
	b := bindingOf(query)
	if b.order == nil {
		return query, args
	}
	out := make([]any, len(b.order))
	for i, n := range b.order {
		if n <= len(args) {
			out[i] = args[n-1]
		}
	}
	return b.query, out
}

// A binding is a statement with numbered parameters made positional:
// order[i] is the number of its i-th ?.
type binding struct {
	query string
	order []int
}

// bindings caches each statement's binding: the statements are few and
// run often.
var bindings sync.Map // string → binding

func bindingOf(query string) binding {
	if b, ok := bindings.Load(query); ok {
		return b.(binding)
	}
	b := parseBinding(query)
	bindings.Store(query, b)
	return b
}

// parseBinding finds the numbered parameters of query outside its quoted
// strings and identifiers.
func parseBinding(query string) binding {
	var (
		out   []byte
		order []int
		quote byte
	)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '?':
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			if j > i+1 {
				n, _ := strconv.Atoi(query[i+1 : j])
				order = append(order, n)
				out = append(out, '?')
				i = j - 1
				continue
			}
		}
		out = append(out, c)
	}
	if order == nil {
		return binding{query: query}
	}
	return binding{query: string(out), order: order}
}

// Bound is q running statements of dialect d: each one bound (Bind) on
// its way to q.
func Bound(q dialect.ExecQuerier, d Dialect) dialect.ExecQuerier {
	if d != MySQL {
		return q
	}
	return boundExecQuerier{q, d}
}

type boundExecQuerier struct {
	dialect.ExecQuerier
	d Dialect
}

func (b boundExecQuerier) Exec(ctx context.Context, query string, args, v any) error {
	query, bound := Bind(b.d, query, asArgs(args))
	return b.ExecQuerier.Exec(ctx, query, bound, v)
}

func (b boundExecQuerier) Query(ctx context.Context, query string, args, v any) error {
	query, bound := Bind(b.d, query, asArgs(args))
	return b.ExecQuerier.Query(ctx, query, bound, v)
}

func asArgs(args any) []any {
	if a, ok := args.([]any); ok {
		return a
	}
	return nil
}

// A SQLQuerier is what runs statements on a *sql.DB or *sql.Tx.
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// BoundSQL is q (a *sql.DB or *sql.Tx) running statements of dialect d,
// each one bound (Bind) on its way.
func BoundSQL(q SQLQuerier, d Dialect) SQLQuerier {
	if d != MySQL {
		return q
	}
	return boundSQL{q, d}
}

type boundSQL struct {
	SQLQuerier
	d Dialect
}

func (b boundSQL) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query, args = Bind(b.d, query, args)
	return b.SQLQuerier.ExecContext(ctx, query, args...)
}

func (b boundSQL) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query, args = Bind(b.d, query, args)
	return b.SQLQuerier.QueryContext(ctx, query, args...)
}

func (b boundSQL) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	query, args = Bind(b.d, query, args)
	return b.SQLQuerier.QueryRowContext(ctx, query, args...)
}
