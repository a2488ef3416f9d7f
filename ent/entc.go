//go:build ignore

// entc.go regenerates this package from the schemas in ../schema.
// Run it through the repository's generate.go: go generate ./...
package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
)

func main() {
	err := entc.Generate("../schema", &gen.Config{
		Target:   ".",
		Package:  "github.com/entoutbox/entoutbox/ent",
		Features: []gen.Feature{gen.FeatureUpsert, gen.FeatureExecQuery, gen.FeatureLock},
	},
		// client.go names entgo.io/ent itself instead of leaving it to goimports,
		// which could pick another package named ent (see the template).
		entc.TemplateFiles("../codegen/template/outbox_imports.tmpl"))
	if err != nil {
		log.Fatalf("entoutbox: generating ent/: %v", err)
	}
}
