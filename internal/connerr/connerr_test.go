package connerr_test

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/entoutbox/entoutbox/internal/connerr"
)

func TestLost(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		lost bool
	}{
		{"none", nil, false},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"session ended idle in a transaction", fmt.Errorf("creating: %w", &pgconn.PgError{Code: "25P03"}), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"a refused statement", &pgconn.PgError{Code: "23505"}, false},
		{"bad connection", fmt.Errorf("relay: %w", driver.ErrBadConn), true},
		{"flattened by a handler", fmt.Errorf("charging: %v", errors.New("dial tcp: connection refused")), true},
		{"the handler's own", errors.New("payment declined"), false},
	} {
		if got := connerr.Lost(c.err); got != c.lost {
			t.Errorf("%s: Lost(%v) = %v, want %v", c.name, c.err, got, c.lost)
		}
	}
}
