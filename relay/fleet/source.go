package fleet

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/internal/outboxdb"
)

// DefaultRegistryTable is the registry table's name when
// Source.RegistryTable is empty.
const DefaultRegistryTable = "entoutbox_tenants"

// RegistryTableDDL makes a registry table named table: one row per
// tenant, the columns of a databases file's entry.
func RegistryTableDDL(table string) string { return outboxdb.RegistryTableDDL(table) }

// Source is where the tenants are listed: a databases file (see File), a
// registry table in a PostgreSQL database the operator's tooling writes
// to (RegistryTableDDL: a row per tenant), or both. A tenant's name is
// unique across both.
type Source struct {
	// File is the databases file's path; none when empty.
	File string
	// Registry is the database of the registry table; none when nil.
	Registry *sql.DB
	// RegistryTable names the registry table, optionally with its schema
	// (schema.table); DefaultRegistryTable when empty.
	RegistryTable string
}

func (s Source) table() string {
	if s.RegistryTable == "" {
		return DefaultRegistryTable
	}
	return s.RegistryTable
}

// check refuses a source without a file or a registry, and a registry
// table name that is not one.
func (s Source) check() error {
	if s.File == "" && s.Registry == nil {
		return errors.New("no tenants' source: name the databases file, or a registry database")
	}
	for _, part := range strings.Split(s.table(), ".") {
		if !schemaName.MatchString(part) {
			return fmt.Errorf("registry table %q: want a lowercase unquoted name, or schema.table", s.table())
		}
	}
	return nil
}

// Read reads the tenants of the file, then of the registry table (in the
// order of their names), refusing them all when one entry or row is
// refused or a name is in both; the error names the entry or row.
func (s Source) Read(ctx context.Context) ([]Tenant, error) {
	_, tenants, err := s.read(ctx)
	return tenants, err
}

// read is Read, with data, what was read, so that the fleet applies the
// tenants when it changed only.
func (s Source) read(ctx context.Context) (data []byte, tenants []Tenant, err error) {
	if err := s.check(); err != nil {
		return nil, nil, fmt.Errorf("fleet: %w", err)
	}
	if s.File != "" {
		if data, tenants, err = readFile(s.File); err != nil {
			return nil, nil, err
		}
	}
	if s.Registry == nil {
		return data, tenants, nil
	}
	rows, err := s.readRegistry(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: registry table %s: %w", s.table(), err)
	}
	inFile := map[string]bool{}
	for _, t := range tenants {
		inFile[t.Name] = true
	}
	for _, t := range rows {
		if inFile[t.Name] {
			return nil, nil, fmt.Errorf("fleet: registry table %s: row %q: the name is also a tenant of the databases file %s",
				s.table(), t.Name, s.File)
		}
	}
	js, err := json.Marshal(rows)
	if err != nil {
		return nil, nil, err
	}
	return append(append(data, 0), js...), append(tenants, rows...), nil
}

// readTimeout bounds a read of the registry table.
const readTimeout = 30 * time.Second

func (s Source) readRegistry(ctx context.Context) ([]Tenant, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	rows, err := outboxdb.ReadRegistry(ctx, s.Registry, s.table())
	if err != nil {
		return nil, err
	}
	tenants := make([]Tenant, len(rows))
	for i, r := range rows {
		tenants[i] = Tenant{Name: r.Name, DatabaseURL: r.DatabaseURL, Schema: r.Schema}
		if err := checkTenant(tenants[i]); err != nil {
			return nil, fmt.Errorf("row %q: %w", r.Name, err)
		}
	}
	return tenants, nil
}
