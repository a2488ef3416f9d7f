package main

import (
	"net/url"
	"strings"
)

// withSearchPath returns the URL with its search_path set to schema, so
// every connection of the pool works in the example's schema.
func withSearchPath(databaseURL, schema string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || u.Scheme == "" {
		// A key=value DSN.
		return databaseURL + " search_path=" + schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
