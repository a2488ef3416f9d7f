package fleet

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/entoutbox/entoutbox/internal/pgsql"
	"github.com/entoutbox/entoutbox/relay"
)

// File is the databases file: a JSON object listing the tenants.
//
//	{"tenants": [
//	  {"name": "acme", "database_url": "postgres://relay@db1:5432/acme"},
//	  {"name": "globex", "database_url": "postgres://relay@db2:5432/shared", "schema": "globex"}
//	]}
type File struct {
	Tenants []Tenant `json:"tenants"`
}

// Tenant is one database the fleet relays.
type Tenant struct {
	// Name names the tenant in logs, in Status and on every message
	// (relay.Config.Tenant; relay.CheckTenant says which names do).
	// Unique in the file.
	Name string `json:"name"`
	// DatabaseURL is the tenant's PostgreSQL database: a postgres:// URL
	// or a key=value DSN.
	DatabaseURL string `json:"database_url"`
	// Schema, when set, is the PostgreSQL schema holding the tenant's
	// outbox tables (schema-per-tenant): the search_path of every
	// connection of its pool.
	Schema string `json:"schema,omitempty"`
}

// URL is where the tenant's pool connects: its URL with its schema as
// the search_path.
func (t Tenant) URL() string {
	if t.Schema == "" {
		return t.DatabaseURL
	}
	return pgsql.WithSearchPath(t.DatabaseURL, t.Schema)
}

// schemaName is the schema names a tenant entry may give: an unquoted
// PostgreSQL identifier, so that search_path names it as written.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_$]{0,62}$`)

// ParseFile reads the tenants of a databases file's contents, refusing an
// entry without a name or URL, with a name given twice, or a name, URL or
// schema the fleet cannot use; the error names the entry.
func ParseFile(data []byte) ([]Tenant, error) {
	var f File
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf(`not a databases file ({"tenants": [{"name": ..., "database_url": ..., "schema": ...}]}): %w`, err)
	}
	seen := map[string]int{}
	for i, t := range f.Tenants {
		where := fmt.Sprintf("tenant %d (%q)", i+1, t.Name)
		if err := checkTenant(t); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if j, dup := seen[t.Name]; dup {
			return nil, fmt.Errorf("%s: the name is also tenant %d's", where, j)
		}
		seen[t.Name] = i + 1
	}
	return f.Tenants, nil
}

func checkTenant(t Tenant) error {
	switch {
	case t.Name == "":
		return fmt.Errorf("name is empty")
	case t.DatabaseURL == "":
		return fmt.Errorf("database_url is empty")
	case t.Schema != "" && !schemaName.MatchString(t.Schema):
		return fmt.Errorf("schema %q: want lowercase letters, digits, '_' and '$', starting with a letter or '_', at most 63 bytes", t.Schema)
	}
	if err := relay.CheckTenant(t.Name); err != nil {
		return err
	}
	if u, err := url.Parse(t.DatabaseURL); err == nil && u.Scheme != "" && u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return fmt.Errorf("database_url has scheme %q: the fleet relays PostgreSQL databases (postgres://) for now", u.Scheme)
	}
	return nil
}

// readFile reads and parses the databases file at path.
func readFile(path string) (data []byte, tenants []Tenant, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: reading the databases file: %w", err)
	}
	tenants, err = ParseFile(data)
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: databases file %s: %w", path, err)
	}
	return data, tenants, nil
}
