//go:build ignore

// entc.go regenerates the test ent package. Run: go generate ./...
package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/entoutbox/entoutbox/codegen"
	"github.com/entoutbox/entoutbox/internal/testent/testevents"
)

func main() {
	err := entc.Generate("./schema", &gen.Config{Package: "github.com/entoutbox/entoutbox/internal/testent"},
		entc.Extensions(codegen.NewExtension(codegen.Events(testevents.All...))))
	if err != nil {
		log.Fatalf("generating internal/testent: %v", err)
	}
}
