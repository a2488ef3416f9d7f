// Package mysqltest gives each test a MariaDB (or MySQL) database of its
// own on the local server, opened as the outbox's documentation tells
// users to open theirs (package mysqldb), and dropped when the test ends.
package mysqltest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/entoutbox/entoutbox/internal/pgtest"
	"github.com/entoutbox/entoutbox/mysqldb"
)

// ServerURL is the server the tests use: $ENTOUTBOX_TEST_MYSQL_URL, or the
// local MariaDB (root, no password) with its database test.
func ServerURL() string {
	if u := os.Getenv("ENTOUTBOX_TEST_MYSQL_URL"); u != "" {
		return u
	}
	return "mysql://root@127.0.0.1:3306/test"
}

// Open creates a database of t's own on the server, dropped when t ends,
// and returns it open with its URL (mysql://…) for commands. Without the
// server t is skipped, or fails under CI=true.
func Open(t testing.TB) (*sql.DB, string) {
	t.Helper()
	admin, err := mysqldb.Open(ServerURL())
	if err == nil {
		err = admin.Ping()
	}
	if err != nil {
		pgtest.Unavailable(t, "MariaDB/MySQL at "+ServerURL(), err)
	}
	name := "entoutbox_" + randomSuffix()
	if _, err := admin.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		_ = admin.Close()
		t.Fatalf("mysqltest: creating database %s: %v", name, err)
	}
	url, err := mysqldb.WithDatabase(ServerURL(), name)
	var db *sql.DB
	if err == nil {
		db, err = mysqldb.Open(url)
	}
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(func() {
		_ = db.Close()
		if _, err := admin.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Errorf("mysqltest: dropping database %s: %v", name, err)
		}
		_ = admin.Close()
	})
	return db, url
}

func randomSuffix() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("mysqltest: %v", err))
	}
	return hex.EncodeToString(b)
}
