// Package entoutbox makes the transactional outbox pattern typed and safe for
// ent and PostgreSQL. See README.md for the quick start.
//
// The lines below regenerate ent/, the tests' ent package and every example;
// CI fails when they change a committed file.
package entoutbox

//go:generate go run -C ent entc.go
//go:generate go run -C internal/testent entc.go
//go:generate go run -C examples/orders/ent entc.go
