// Package pgsql holds the small PostgreSQL text helpers the runtime
// packages share.
package pgsql

import (
	"net/url"
	"strings"
)

// QuoteIdent quotes a table or column name.
func QuoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// QuoteLiteral quotes a string constant.
func QuoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// WithSearchPath returns databaseURL (a URL or a key=value DSN) with its
// search_path set to schema, so every connection of a pool works in it.
func WithSearchPath(databaseURL, schema string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || u.Scheme == "" {
		return databaseURL + " search_path=" + schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
