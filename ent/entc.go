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
	})
	if err != nil {
		log.Fatalf("entoutbox: generating ent/: %v", err)
	}
}
