// Package connerr tells a lost or refused database connection from a
// statement the server refused: the consumers pause on the first and
// count an attempt for the second; the relay tries a rebalance again on
// the first.
package connerr

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Lost tells whether err's chain says that a connection to the
// database failed or was lost, rather than that a statement failed; the
// text is read only for chains a handler flattened (%v).
func Lost(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", // admin_shutdown
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now: starting up, shutting down, in recovery
			pgErr.Code == "57P05", // idle_session_timeout
			pgErr.Code == "25P03", // idle_in_transaction_session_timeout: the session was ended
			pgErr.Code == "53300": // too_many_connections
			return true
		}
		return false // the server answered the statement
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone), errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		pgconn.SafeToRetry(err):
		return true
	}
	text := err.Error()
	for _, hint := range hints {
		if strings.Contains(text, hint) {
			return true
		}
	}
	return false
}

// hints are the texts of the errors Lost looks for,
// as a handler that formatted them with %v leaves them.
var hints = []string{"failed to connect", "conn closed", "connection refused", "connection reset",
	"broken pipe", "unexpected EOF", "SQLSTATE 08", "SQLSTATE 57P0", "sql: database is closed",
	"the database system is", "server closed the connection", "terminating connection"}
