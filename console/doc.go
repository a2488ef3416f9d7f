// Package console is a web console for the outbox: the backlog, delivery
// rate, relays and consumers at a glance, a search for events with each
// event's whole story, and the dead letters with their retry and discard.
// `entoutbox console` serves it; a service can mount the same handler:
//
//	h, err := console.New(console.Config{DB: db, Token: os.Getenv("CONSOLE_TOKEN"), BasePath: "/outbox"})
//	if err != nil { ... }
//	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))
//
// It reads the outbox and dead-letter tables Config.Table and
// Config.DeadLetterTable name (the schema package's defaults when empty),
// through the same SQL as the relay and package admin (internal/outboxdb):
// an event is delivered when any read path delivered it, the WAL path
// included.
//
// With Config.Tenants instead of DB, it is the console of a relay fleet's
// tenants (`entoutbox console --databases-file`): a page of every
// tenant's backlog, read per database URL on one connection, and each
// tenant's pages under /t/{tenant}/, served by a console of its database
// on a pool opened on demand, bounded by TenantConnections and closed
// after TenantIdle. The token and CSRF checks are the console's, for
// every page.
//
// Pages are rendered on the server with html/template (every value
// escaped, payloads pretty-printed and shown as text); the templates, a
// stylesheet and a few lines of script are embedded in the binary. Charts
// are inline SVG drawn on the server.
//
// # Safety
//
// Without a Token the console answers only requests addressed to a
// loopback host (which also defeats DNS rebinding); ListenCheck refuses a
// non-loopback address without one. With a Token every request carries it
// as `Authorization: Bearer`, as the password of basic auth, or through
// the session cookie the login form sets. Every action is a POST that
// must carry the session's CSRF token; cookies are HttpOnly and
// SameSite=Strict. ReadOnly hides the actions and refuses them.
//
// Retry and discard are the admin package's, the same as
// `entoutbox dead-letters`: nothing is deleted.
package console
