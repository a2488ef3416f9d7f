package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/console"
)

// Past LoginAttempts failed token attempts in a minute, an address is
// refused with 429 before its token is compared, through the login form
// and the Authorization header alike; other addresses are not (an IPv6
// address counts with its /64).
func TestTokenAttemptsAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	h, err := console.New(console.Config{DB: e.db.DB, Token: "s3cret", LoginAttempts: 3})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	// The login form, from 127.0.0.1.
	c := browserClient(t)
	_, page := get(t, c, srv.URL+"/login")
	csrf := csrfOf(t, page)
	for i := range 3 {
		status, _ := post(t, c, srv.URL+"/login", url.Values{"csrf": {csrf}, "token": {"wrong" + strconv.Itoa(i)}})
		require.Equal(t, http.StatusUnauthorized, status, "attempt %d", i+1)
	}
	status, body := post(t, c, srv.URL+"/login", url.Values{"csrf": {csrf}, "token": {"s3cret"}})
	require.Equal(t, http.StatusTooManyRequests, status, "the 4th attempt, right token or not: %s", body)
	assert.Contains(t, body, "too many failed token attempts")
	status, _ = get(t, c, srv.URL+"/")
	assert.Equal(t, http.StatusUnauthorized, status, "not logged in")
	status, _ = get(t, c, srv.URL+"/", "Authorization", "Bearer s3cret")
	assert.Equal(t, http.StatusTooManyRequests, status, "nor by header, from the same address")
	resp, err := c.Post(srv.URL+"/login", "application/x-www-form-urlencoded", nil)
	require.NoError(t, err)
	resp.Body.Close()
	wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.True(t, wait > 0 && wait <= 60, "Retry-After %d s, within the minute", wait)

	// The header, from other addresses.
	from := func(addr, token string) int {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "http://localhost/dead-letters", nil)
		r.RemoteAddr = addr
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	assert.Equal(t, http.StatusOK, from("10.0.0.3:4000", "s3cret"), "another address gets in")
	for i := range 3 {
		assert.Equal(t, http.StatusUnauthorized, from("10.0.0.2:4000", "wrong"), "attempt %d", i+1)
	}
	assert.Equal(t, http.StatusTooManyRequests, from("10.0.0.2:4001", "s3cret"), "the 4th, from another port")
	assert.Equal(t, http.StatusOK, from("10.0.0.3:4000", "s3cret"))
	for range 3 {
		assert.Equal(t, http.StatusUnauthorized, from("[2001:db8::1]:4000", "wrong"))
	}
	assert.Equal(t, http.StatusTooManyRequests, from("[2001:db8::2]:4000", "s3cret"), "the same /64")
	assert.Equal(t, http.StatusOK, from("[2001:db8:0:1::1]:4000", "s3cret"), "another /64")
}
