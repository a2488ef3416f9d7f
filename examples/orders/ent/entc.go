//go:build ignore

// entc.go regenerates the example's ent package with the outbox extension.
// Run it through the repository's generate.go: go generate ./...
package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/entoutbox/entoutbox/codegen"
	"github.com/entoutbox/entoutbox/examples/orders/orderevents"
)

func main() {
	ext := codegen.NewExtension(codegen.Events(orderevents.OrderPlaced{}, orderevents.OrderPaid{}, orderevents.OrderCancelled{}))
	err := entc.Generate("./schema", &gen.Config{}, entc.Extensions(ext))
	if err != nil {
		log.Fatalf("entoutbox example: generating ent: %v", err)
	}
}
