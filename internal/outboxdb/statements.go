package outboxdb

import (
	"fmt"
	"maps"
	"slices"
)

// A Statement is one named SQL statement on the outbox's tables. Every
// statement the module runs on those tables is defined in this package
// (a test refuses SQL on them anywhere else), and each one's text, rendered
// for the default table names, is a golden file under
// testdata/statements: a change to a statement is seen in review, and a
// second database implements the same names.
//
// A statement whose text depends on more than the table names (a list of
// filters, a batch size) is built by a function of this package; it
// defines one Statement per shape worth reviewing, as an example.
type Statement struct {
	name  string
	forms map[Dialect]func(Tables) string
}

// statements is every defined statement by name.
var statements = map[string]*Statement{}

// define names the statement render builds; a name defined twice is a
// programming error, found at init.
func define(name string, render func(t Tables) string) *Statement {
	if _, dup := statements[name]; dup {
		panic(fmt.Sprintf("outboxdb: statement %q defined twice", name))
	}
	s := &Statement{name: name, forms: map[Dialect]func(Tables) string{Postgres: render}}
	statements[name] = s
	return s
}

// defineOnly names the statement render builds for dialect d alone: a
// statement of a path only that database runs.
func defineOnly(name string, d Dialect, render func(t Tables) string) *Statement {
	s := define(name, render)
	s.forms = map[Dialect]func(Tables) string{d: render}
	return s
}

// also gives s its form for dialect d, rendered by render.
func (s *Statement) also(d Dialect, render func(t Tables) string) *Statement {
	s.forms[d] = render
	return s
}

// Name is the statement's name: "area/what".
func (s *Statement) Name() string { return s.name }

// SQL is the statement's text for the tables t, in t's dialect. Asking
// for a form the statement lacks is a programming error: the callers of
// the statements another database runs check its dialect first.
func (s *Statement) SQL(t Tables) string {
	render, ok := s.forms[t.Dialect]
	if !ok {
		panic(fmt.Sprintf("outboxdb: statement %q has no %s form", s.name, t.Dialect))
	}
	return render(t)
}

// Dialects are the databases s has a form for, PostgreSQL first.
func (s *Statement) Dialects() []Dialect { return slices.Sorted(maps.Keys(s.forms)) }

// Golden is the path of the golden file of s's form for d, below
// testdata/statements.
func (s *Statement) Golden(d Dialect) string { return s.name + d.goldenSuffix() + ".sql" }

// Statements is every defined statement, by name.
func Statements() []*Statement {
	names := slices.Sorted(maps.Keys(statements))
	out := make([]*Statement, len(names))
	for i, n := range names {
		out[i] = statements[n]
	}
	return out
}
