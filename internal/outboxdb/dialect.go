package outboxdb

import (
	"database/sql"
	"fmt"
	"reflect"
	"strings"

	"github.com/entoutbox/entoutbox/internal/pgsql"
)

// Dialect is the database a Tables' statements are written for. The zero
// value is PostgreSQL, which every statement is written for; a statement
// another database runs has a form for it too (Statement.also), and the
// golden file of that form beside the PostgreSQL one.
type Dialect string

// The dialects, named as ent names them (dialect.Postgres, dialect.SQLite,
// dialect.MySQL), except PostgreSQL, the zero value. MySQL is MySQL 8 and
// MariaDB 10.6+: their forms use what both have.
const (
	Postgres Dialect = ""
	SQLite   Dialect = "sqlite3"
	MySQL    Dialect = "mysql"
)

// DialectOf is the dialect of ent's dialect name; an error names the
// databases the outbox runs on.
func DialectOf(entDialect string) (Dialect, error) {
	switch entDialect {
	case "postgres", "":
		return Postgres, nil
	case string(SQLite):
		return SQLite, nil
	case string(MySQL):
		return MySQL, nil
	}
	return "", fmt.Errorf("the outbox runs on PostgreSQL, MySQL/MariaDB and SQLite, not on %q", entDialect)
}

// String is the database's name, for messages.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "PostgreSQL"
	case SQLite:
		return "SQLite"
	case MySQL:
		return "MySQL"
	}
	return string(d)
}

// goldenSuffix tells a form's golden file from the PostgreSQL one's:
// emit/give-back-number.sqlite.sql beside emit/give-back-number.sql.
func (d Dialect) goldenSuffix() string {
	switch d {
	case Postgres:
		return ""
	case MySQL:
		return ".mysql"
	}
	return ".sqlite"
}

// sqliteNow is SQLite's clock as its statements write times: UTC, to the
// millisecond, in a form its date functions and the drivers read.
const sqliteNow = `strftime('%Y-%m-%d %H:%M:%f', 'now')`

// DialectFrom is the dialect of q when it says (an ent driver: Dialect()),
// PostgreSQL otherwise.
func DialectFrom(q any) Dialect {
	if d, ok := q.(interface{ Dialect() string }); ok {
		switch Dialect(d.Dialect()) {
		case SQLite:
			return SQLite
		case MySQL:
			return MySQL
		}
	}
	return Postgres
}

// DialectOfDB is db's database, by its driver's type: PostgreSQL unless it
// is SQLite's or MySQL's (a *sql.DB does not say which it is).
func DialectOfDB(db *sql.DB) (d Dialect) {
	if db == nil {
		return Postgres
	}
	defer func() { // a DB not made by sql.Open has no driver to ask
		if recover() != nil {
			d = Postgres
		}
	}()
	switch driver := strings.ToLower(reflect.TypeOf(db.Driver()).String()); {
	case strings.Contains(driver, "sqlite"):
		return SQLite
	case strings.Contains(driver, "mysql"):
		return MySQL
	}
	return Postgres
}

// mysqlNow is MySQL's clock as its statements write times: UTC (the
// session's zone, see package mysqldb, is irrelevant to it), to the
// microsecond, as the datetime(6) columns keep them.
const mysqlNow = `UTC_TIMESTAMP(6)`

// quote quotes the identifier name for d: backticks on MySQL, whose
// double quotes are strings.
func (d Dialect) quote(name string) string {
	if d == MySQL {
		return "`" + strings.ReplaceAll(name, "`", "``") + "`"
	}
	return pgsql.QuoteIdent(name)
}
