package entoutbox

// The lines below regenerate ent/, the tests' ent package and every example;
// CI fails when they change a committed file. The package doc is in doc.go.
//
//go:generate go run -C ent entc.go
//go:generate go run -C internal/testent entc.go
//go:generate go run -C examples/orders/ent entc.go
