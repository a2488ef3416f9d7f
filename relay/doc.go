// Package relay is entoutbox's runtime: it writes outbox rows through
// Watermill's SQL publisher on an ent transaction (used by the generated Emit
// methods) and moves committed rows to a Watermill broker.
package relay
