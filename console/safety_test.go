package console_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/console"
)

func TestListenCheckRefusesNonLoopbackWithoutToken(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true,
		":8080": false, "0.0.0.0:8080": false, "10.1.2.3:8080": false, "[::]:8080": false, "example.com:80": false} {
		err := console.ListenCheck(addr, "")
		if ok {
			assert.NoError(t, err, addr)
		} else {
			assert.ErrorContains(t, err, "--token", addr)
		}
		assert.NoError(t, console.ListenCheck(addr, "s3cret"), addr)
	}
	assert.ErrorContains(t, console.ListenCheck("8080", ""), `address "8080"`)
}

// Without a token the console answers loopback hosts only, so a page on
// another site that rebinds its name to 127.0.0.1 gets nothing.
func TestNoTokenServesLoopbackHostsOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	c := browserClient(t)
	status, _ := get(t, c, e.srv.URL+"/")
	require.Equal(t, http.StatusOK, status)
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
	req.Host = "attacker.example:80"
	status, body := do(t, c, req)
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "only loopback hosts")
}

func TestTokenIsRequired(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{Token: "s3cret"})
	c := browserClient(t)
	status, _ := get(t, c, e.srv.URL+"/")
	assert.Equal(t, http.StatusUnauthorized, status, "no token")
	status, _ = get(t, c, e.srv.URL+"/", "Authorization", "Bearer wrong")
	assert.Equal(t, http.StatusUnauthorized, status, "a wrong token")
	status, _ = get(t, c, e.srv.URL+"/dead-letters", "Authorization", "Bearer s3cret")
	assert.Equal(t, http.StatusOK, status, "Bearer")
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
	req.SetBasicAuth("ops", "s3cret")
	status, _ = do(t, c, req)
	assert.Equal(t, http.StatusOK, status, "basic auth")
	status, _ = get(t, c, e.srv.URL+"/events", "Accept", "text/html")
	assert.Equal(t, http.StatusSeeOther, status, "a browser goes to the login form")

	// The login form: a wrong token, then the right one.
	status, page := get(t, c, e.srv.URL+"/login")
	require.Equal(t, http.StatusOK, status)
	csrf := csrfOf(t, page)
	status, _ = post(t, c, e.srv.URL+"/login", url.Values{"csrf": {csrf}, "token": {"wrong"}})
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _ = post(t, c, e.srv.URL+"/login", url.Values{"token": {"s3cret"}})
	assert.Equal(t, http.StatusForbidden, status, "a login without the CSRF token")
	status, _ = post(t, c, e.srv.URL+"/login", url.Values{"csrf": {csrf}, "token": {"s3cret"}, "next": {"//attacker.example/"}})
	require.Equal(t, http.StatusSeeOther, status)
	status, _ = get(t, c, e.srv.URL+"/")
	assert.Equal(t, http.StatusOK, status, "logged in")
}

// An action without the CSRF token of the session, from another origin,
// or without the console's token is refused, and the letter stays open.
func TestActionsNeedCSRFAndToken(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{Token: "s3cret"})
	d := e.relayLetter(t, "orders", `{"order_id":42}`)
	auth := []string{"Authorization", "Bearer s3cret"}
	retry := e.srv.URL + "/dead-letters/retry"
	c := browserClient(t)
	_, page := get(t, c, e.srv.URL+"/dead-letters/"+strconv.FormatInt(d.ID, 10), auth...)
	csrf := csrfOf(t, page)
	other := browserClient(t)
	_, otherPage := get(t, other, e.srv.URL+"/", auth...)

	for name, tc := range map[string]struct {
		c      *http.Client
		form   url.Values
		header []string
		status int
	}{
		"no CSRF token":              {c, url.Values{"id": {strconv.FormatInt(d.ID, 10)}}, auth, http.StatusForbidden},
		"a wrong CSRF token":         {c, url.Values{"id": {strconv.FormatInt(d.ID, 10)}, "csrf": {"x" + csrf}}, auth, http.StatusForbidden},
		"another session's token":    {c, url.Values{"id": {strconv.FormatInt(d.ID, 10)}, "csrf": {csrfOf(t, otherPage)}}, auth, http.StatusForbidden},
		"a CSRF token of no session": {browserClient(t), url.Values{"id": {strconv.FormatInt(d.ID, 10)}, "csrf": {csrf}}, auth, http.StatusForbidden},
		"another origin":             {c, url.Values{"id": {strconv.FormatInt(d.ID, 10)}, "csrf": {csrf}}, append([]string{"Origin", "https://attacker.example"}, auth...), http.StatusForbidden},
		"no token":                   {c, url.Values{"id": {strconv.FormatInt(d.ID, 10)}, "csrf": {csrf}}, nil, http.StatusUnauthorized},
	} {
		status, body := post(t, tc.c, retry, tc.form, tc.header...)
		assert.Equal(t, tc.status, status, "%s: %s", name, body)
		assert.Equal(t, admin.StateOpen, e.reload(t, d.ID).State(), name)
	}
	status, body := post(t, c, retry, url.Values{"id": {strconv.FormatInt(d.ID, 10)}, "csrf": {csrf}}, auth...)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, admin.StateRetried, e.reload(t, d.ID).State())
}

func TestReadOnlyHidesAndRefusesActions(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{ReadOnly: true})
	d := e.relayLetter(t, "orders", `{"order_id":42}`)
	c := browserClient(t)
	for _, path := range []string{"/dead-letters", "/dead-letters/" + strconv.FormatInt(d.ID, 10)} {
		status, page := get(t, c, e.srv.URL+path)
		require.Equal(t, http.StatusOK, status)
		assert.NotContains(t, page, "/dead-letters/retry", path)
		assert.NotContains(t, page, "/dead-letters/discard", path)
		assert.Contains(t, page, "read-only", path)
	}
	_, page := get(t, c, e.srv.URL+"/")
	for _, action := range []string{"retry", "discard"} {
		status, body := post(t, c, e.srv.URL+"/dead-letters/"+action,
			url.Values{"id": {strconv.FormatInt(d.ID, 10)}, "csrf": {csrfOf(t, page)}, "note": {"n"}})
		assert.Equal(t, http.StatusForbidden, status, body)
	}
	assert.Equal(t, admin.StateOpen, e.reload(t, d.ID).State())
}

// Payloads, headers and reasons are text: markup in them is escaped.
func TestPayloadIsEscaped(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	evil := `{"note":"</pre><script>alert(1)</script><img src=x onerror=alert(2)>"}`
	id := e.emit(t, "orders", "Order", "<b>7</b>", evil, 1)[0]
	d := e.relayLetter(t, "orders", evil)
	c := browserClient(t)
	for _, path := range []string{"/events/" + id.String(), "/dead-letters/" + strconv.FormatInt(d.ID, 10),
		"/events?aggregate_id=%3Cb%3E7%3C%2Fb%3E"} {
		status, page := get(t, c, e.srv.URL+path)
		require.Equal(t, http.StatusOK, status, path)
		assert.NotContains(t, page, "<script>alert", path)
		assert.NotContains(t, page, "<img src=x", path)
		assert.NotContains(t, page, "<b>7</b>", path)
	}
	_, page := get(t, c, e.srv.URL+"/events/"+id.String())
	assert.Contains(t, page, "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;")
	assert.True(t, strings.Contains(page, `&#34;note&#34;: `), "the payload is indented")
}

// The list's bulk actions: the selected letters, and every open letter
// the filter selects; a discard without a note is refused.
func TestBulkRetryAndDiscard(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	a, b, c := e.relayLetter(t, "orders", `{"order_id":1}`), e.relayLetter(t, "orders", `{"order_id":2}`), e.relayLetter(t, "orders", `{"order_id":3}`)
	billing, err := e.ent.DeadLetter.Create().SetSource("billing").SetReason("the billing code has a bug").
		SetEventName("order.paid").Save(t.Context())
	require.NoError(t, err)
	cl := browserClient(t)
	_, page := get(t, cl, e.srv.URL+"/dead-letters")
	require.Contains(t, page, `value="`+strconv.FormatInt(a.ID, 10)+`"`)
	csrf := csrfOf(t, page)
	id := func(x int64) string { return strconv.FormatInt(x, 10) }

	status, body := post(t, cl, e.srv.URL+"/dead-letters/retry", url.Values{"csrf": {csrf}, "id": {id(a.ID), id(b.ID)}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "retried 2 of 2")
	status, body = post(t, cl, e.srv.URL+"/dead-letters/discard", url.Values{"csrf": {csrf}, "all": {"1"}, "source": {"relay"}})
	assert.Equal(t, http.StatusBadRequest, status, "a discard needs a note: %s", body)
	status, body = post(t, cl, e.srv.URL+"/dead-letters/discard", url.Values{"csrf": {csrf}, "all": {"1"}, "source": {"relay"}, "note": {"duplicates of 41"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "discarded 1 of 1", "only the open relay letter")
	for d, want := range map[int64]admin.State{a.ID: admin.StateRetried, b.ID: admin.StateRetried, c.ID: admin.StateDiscarded, billing.ID: admin.StateOpen} {
		assert.Equal(t, want, e.reload(t, d).State(), "letter %d", d)
	}
	status, body = post(t, cl, e.srv.URL+"/dead-letters/retry", url.Values{"csrf": {csrf}, "id": {"999999"}})
	assert.Equal(t, http.StatusNotFound, status, body)
}

// The token is compared in full: a token of the right length, a prefix,
// the token with more after it, and no token are all refused, by every
// way a token is given (Bearer, basic auth, the login form).
func TestTokenIsComparedInFull(t *testing.T) {
	t.Parallel()
	const token = "s3cret-Token"
	e := setup(t, console.Config{Token: token, LoginAttempts: -1}) // more wrong tokens than the limit lets through
	wrong := map[string]string{
		"the same length":            "s3cret-Tokem",
		"the same length, all wrong": strings.Repeat("x", len(token)),
		"a prefix":                   token[:len(token)-1],
		"the token and more":         token + "x",
		"empty":                      "",
	}
	c := browserClient(t)
	for name, tok := range wrong {
		status, _ := get(t, c, e.srv.URL+"/", "Authorization", "Bearer "+tok)
		assert.Equal(t, http.StatusUnauthorized, status, "Bearer: %s (%q)", name, tok)
		req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
		require.NoError(t, err)
		req.SetBasicAuth("ops", tok)
		status, _ = do(t, c, req)
		assert.Equal(t, http.StatusUnauthorized, status, "basic auth: %s (%q)", name, tok)

		lc := browserClient(t)
		_, page := get(t, lc, e.srv.URL+"/login")
		status, _ = post(t, lc, e.srv.URL+"/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {tok}})
		assert.Equal(t, http.StatusUnauthorized, status, "login form: %s (%q)", name, tok)
		status, _ = get(t, lc, e.srv.URL+"/")
		assert.Equal(t, http.StatusUnauthorized, status, "after a refused login: %s (%q)", name, tok)
	}

	status, _ := get(t, c, e.srv.URL+"/", "Authorization", "Bearer "+token)
	assert.Equal(t, http.StatusOK, status, "Bearer with the token")
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
	require.NoError(t, err)
	req.SetBasicAuth("ops", token)
	status, _ = do(t, c, req)
	assert.Equal(t, http.StatusOK, status, "basic auth with the token")
	lc := browserClient(t)
	_, page := get(t, lc, e.srv.URL+"/login")
	status, _ = post(t, lc, e.srv.URL+"/login", url.Values{"csrf": {csrfOf(t, page)}, "token": {token}})
	require.Equal(t, http.StatusSeeOther, status, "login with the token")
	status, _ = get(t, lc, e.srv.URL+"/")
	assert.Equal(t, http.StatusOK, status, "logged in with the token")
}

// Without a token the console answers only Host headers naming this
// machine: localhost and the loopback addresses. Any other address, even
// a private one, or a name, may be a page that rebinds its name, or
// another machine on the network.
func TestNoTokenRefusesEveryNonLoopbackHost(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	c := browserClient(t)
	served := []string{"localhost", "localhost:8080", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:8080"}
	refused := []string{"10.0.0.5", "10.0.0.5:8080", "192.168.1.1", "192.168.1.1:80", "172.16.0.1", "0.0.0.0", "0.0.0.0:8080",
		"8.8.8.8", "203.0.113.7:443", "[::]", "[::]:8080", "[2001:db8::1]", "[2001:db8::1]:8080", "[fe80::1]", "[::ffff:10.0.0.5]",
		"example.com", "example.com:8080", "localhost.example.com", "127.0.0.1.example.com"}
	for _, host := range served {
		req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
		require.NoError(t, err)
		req.Host = host
		status, body := do(t, c, req)
		assert.Equal(t, http.StatusOK, status, "Host %s: %s", host, body)
	}
	for _, host := range refused {
		req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
		require.NoError(t, err)
		req.Host = host
		status, body := do(t, c, req)
		assert.Equal(t, http.StatusForbidden, status, "Host %s", host)
		assert.Contains(t, body, "only loopback hosts", "Host %s", host)
	}

	// With a token, the token is what guards: any host is served to it.
	e = setup(t, console.Config{Token: "s3cret"})
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
	require.NoError(t, err)
	req.Host = "10.0.0.5:8080"
	req.Header.Set("Authorization", "Bearer s3cret")
	status, body := do(t, c, req)
	assert.Equal(t, http.StatusOK, status, "a token on Host 10.0.0.5:8080: %s", body)
}

// The overview lists the aggregates each consumer holds behind a dead
// letter, with the event they wait for; nothing when none is held.
func TestOverviewShowsHeldAggregates(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	c := browserClient(t)
	_, body := get(t, c, e.srv.URL+"/")
	require.NotContains(t, body, `id="held"`, "nothing held, no table")

	_, err := e.db.DB.Exec(`INSERT INTO outbox_consumer_positions (consumer, topic, aggregate_type, aggregate_id, last_seq,
		held_seq, held_event_id, held_at, updated_at) VALUES
		('billing', 'orders', 'Order', '7', 4, 5, '0190a3c2-0000-7000-8000-000000000005', now() - interval '2 hours', now()),
		('audit', 'orders', 'Order', '8', 9, NULL, NULL, NULL, now())`)
	require.NoError(t, err)
	status, body := get(t, c, e.srv.URL+"/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `id="held"`)
	require.Contains(t, body, `/dead-letters?source=billing`)
	require.Contains(t, body, "orders Order/7")
	require.Contains(t, body, `/events/0190a3c2-0000-7000-8000-000000000005`)
	require.Contains(t, body, "(seq 5)")
	require.NotContains(t, body, "Order/8", "a position that holds nothing is not listed")
}
