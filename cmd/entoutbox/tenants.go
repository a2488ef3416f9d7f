package main

import (
	"fmt"

	"github.com/entoutbox/entoutbox/relay/fleet"
)

// tenantSource is where --databases-file and --registry-database-url
// (with --registry-table) list the fleet's tenants; closeSource closes
// the registry's pool, which holds one connection at most.
func tenantSource(file, registryURL, registryTable string) (src fleet.Source, closeSource func(), err error) {
	src = fleet.Source{File: file, RegistryTable: registryTable}
	if registryURL == "" {
		return src, func() {}, nil
	}
	registry, err := openDB(registryURL)
	if err != nil {
		return src, nil, fmt.Errorf("--registry-database-url: %w", err)
	}
	registry.SetMaxOpenConns(1) // one read at a time, every second at most
	src.Registry = registry
	return src, func() { _ = registry.Close() }, nil
}
