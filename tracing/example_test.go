package tracing_test

import (
	"context"
	"log"

	"github.com/entoutbox/entoutbox/tracing"
)

// A service that emits and consumes events exports its spans as the
// OTEL_ environment variables say, and sends the last ones as it ends.
func ExampleFromEnv() {
	ctx := context.Background()
	stop, err := tracing.FromEnv(ctx, "billing")
	if err != nil {
		log.Fatal(err)
	}
	defer stop(context.Background())
	// Run the service: Emit in request handlers, the generated consumers.
}
