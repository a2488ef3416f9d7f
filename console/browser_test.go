package console_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entoutbox/entoutbox/admin"
	"github.com/entoutbox/entoutbox/broker"
	"github.com/entoutbox/entoutbox/console"
	outboxrow "github.com/entoutbox/entoutbox/ent/outbox"
	"github.com/entoutbox/entoutbox/relay"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "rewrite docs/screenshots/*.png from the browser tests")

// One headless Chromium for the test binary; each test has its own tab.
var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
	dir    string
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	if browser.dir != "" {
		_ = os.RemoveAll(browser.dir)
	}
	os.Exit(code)
}

func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// tab opens a browser tab for t, or skips t when there is no Chromium
// (fails under CI=true), or under -short.
func tab(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: drives a headless Chromium")
	}
	browser.once.Do(func() {
		path := chromiumPath()
		if path == "" {
			browser.err = exec.ErrNotFound
			return
		}
		browser.dir, browser.err = os.MkdirTemp("", "console-chromium-")
		if browser.err != nil {
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(browser.dir),
			chromedp.WindowSize(1280, 900))
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		browser.ctx, browser.cancel = bctx, func() { cancelBrowser(); cancelAlloc() }
		browser.err = chromedp.Do(bctx) // starts the browser
	})
	if browser.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Chromium is required under CI=true: %v", browser.err)
		}
		t.Skipf("skipping: no headless Chromium (%v); install chromium, or set CI=true to fail instead", browser.err)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx), "opening a tab")
	ctx, cancelTimeout := context.WithTimeout(ctx, patience)
	t.Cleanup(cancelTimeout)
	return ctx
}

// text reads the visible text of sel, looking again until the page has
// it: the overview reloads itself, and a read that meets the reload (the
// document it started in is gone) is tried on the new one, as an eye
// would.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s *string
	var err error
	ok := assert.Eventually(t, func() bool {
		s, err = chromedp.Run(ctx, chromedp.Evaluate[*string](`(() => { const e = document.readyState === "complete" && `+
			`document.querySelector(`+strconv.Quote(sel)+`); return e ? e.innerText : null })()`))
		return err == nil && s != nil
	}, patience, 30*time.Millisecond)
	require.True(t, ok, "reading %s: %v", sel, err)
	return *s
}

// waitFor waits until the page, the one a click led to, has sel: it asks
// each document anew, where a query would stay on the one it started in.
func waitFor(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	var last string
	ok := assert.Eventually(t, func() bool {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.readyState === "complete" && !!document.querySelector(`+strconv.Quote(sel)+`)`))
		if !ok {
			last, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
		}
		return err == nil && ok
	}, patience, 30*time.Millisecond)
	require.True(t, ok, "the page has no %s; it shows: %s", sel, last)
}

func TestBrowserOverviewShowsBacklog(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	ids := e.emit(t, "orders", "Order", "1", `{"order_id":1}`, 3)
	e.emit(t, "invoices", "Invoice", "9", `{"invoice_id":9}`, 2)
	e.relayLetter(t, "orders", `{"order_id":42}`)
	_, err := e.ent.DeadLetter.Create().SetSource("billing").SetReason("the billing code has a bug").Save(t.Context())
	require.NoError(t, err)
	_, err = e.ent.ProcessedEvent.Create().SetConsumer("billing").SetEventID(ids[0]).SetEventName("order.paid").Save(t.Context())
	require.NoError(t, err)
	ctx := tab(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#pending"))))
	assert.Equal(t, "5", text(t, ctx, "#pending"))
	assert.Equal(t, "2", text(t, ctx, "#open-letters"))
	consumers := text(t, ctx, "#consumers")
	assert.Regexp(t, `billing\s+1\s+\S+ ago\s+1`, consumers, "processed 1 in the last minute, 1 open dead letter")
	topics := text(t, ctx, "#topics")
	assert.Contains(t, topics, "orders")
	assert.Contains(t, topics, "invoices")
}

func TestBrowserSearchFindsEventByAggregateID(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	e.emit(t, "orders", "Order", "other", `{"order_id":2}`, 20)
	want := e.emit(t, "orders", "Order", "order-7731", `{"order_id":7731,"amount_cents":4200}`, 1)[0]
	e.emit(t, "orders", "Order", "other", `{"order_id":2}`, 20)
	ctx := tab(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/events"),
		chromedp.SetValue(chromedp.CSS(`input[name=aggregate_id]`), "order-7731"),
		chromedp.Click(chromedp.CSS(`#search button`))))
	waitFor(t, ctx, "#how")
	results := text(t, ctx, "#results")
	assert.Contains(t, results, want.String())
	assert.Equal(t, 1, strings.Count(results, "order-7731"))
	assert.Contains(t, text(t, ctx, "#how"), "bounded scan", "the page says no index served the search")

	// The event's page: its story and formatted payload.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#results a.mono`))))
	waitFor(t, ctx, "#payload")
	assert.Equal(t, want.String(), text(t, ctx, "#event-id"))
	assert.Contains(t, text(t, ctx, "#payload"), "\"amount_cents\": 4200")
	assert.Contains(t, text(t, ctx, "#story"), "emitted")
	assert.Equal(t, "pending", text(t, ctx, "#state"))
}

// A relay dead letter retried from its page goes back to the outbox and a
// running fast relay delivers it to the broker.
func TestBrowserRetriedDeadLetterIsDelivered(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	ctx := context.Background()
	br, err := broker.Open(ctx, "mem://", broker.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = br.Close() })
	sub, err := br.Subscriber("test")
	require.NoError(t, err)
	received, err := sub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	r, err := relay.New(relay.Config{DB: e.db.DB, Publisher: br.Publisher(), Path: relay.PathFast,
		PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	d := e.relayLetter(t, "orders", `{"order_id":42}`)
	b := tab(t)
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(e.srv.URL+"/dead-letters/"+strconv.FormatInt(d.ID, 10)),
		chromedp.Click(chromedp.CSS("#retry"))))
	waitFor(t, b, "#outcomes")
	assert.Contains(t, text(t, b, "#outcomes"), string(admin.Rebuilt))
	select {
	case m := <-received:
		assert.Equal(t, d.EventID.String(), m.UUID)
		m.Ack()
	case <-time.After(patience):
		t.Fatal("the retried event did not reach the broker")
	}
	require.Eventually(t, func() bool {
		o, err := e.ent.Outbox.Query().Where(outboxrow.EventID(d.EventID)).Only(ctx)
		return err == nil && o.DeliveredAt != nil
	}, patience, 20*time.Millisecond, "the outbox row is marked delivered")
	assert.Equal(t, admin.StateRetried, e.reload(t, d.ID).State(), "the letter stays, marked retried")

	require.NoError(t, chromedp.Do(b, chromedp.Navigate(e.srv.URL+"/events/"+d.EventID.String()), chromedp.WaitVisible(chromedp.CSS("#story"))))
	assert.Equal(t, "delivered", text(t, b, "#state"))
	story := text(t, b, "#story")
	assert.Contains(t, story, "dead-lettered by relay")
	assert.Contains(t, story, "retried")
	assert.Contains(t, story, "delivered to the broker")
}

func TestBrowserDiscardKeepsTheRecord(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	d := e.relayLetter(t, "orders", `{"order_id":42}`)
	b := tab(t)
	page := e.srv.URL + "/dead-letters/" + strconv.FormatInt(d.ID, 10)
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(page),
		chromedp.SetValue(chromedp.CSS("#note"), "refunded by hand, ticket 1234"),
		chromedp.Click(chromedp.CSS("#discard"))))
	waitFor(t, b, "#outcomes")
	assert.Contains(t, text(t, b, "#outcomes"), string(admin.Discarded))
	got := e.reload(t, d.ID)
	assert.Equal(t, admin.StateDiscarded, got.State())
	assert.Equal(t, "refunded by hand, ticket 1234", got.DiscardNote)
	assert.Equal(t, d.Payload, got.Payload, "the record is whole")
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#letter-state"))))
	assert.Equal(t, "discarded", text(t, b, "#letter-state"))
	assert.Equal(t, "refunded by hand, ticket 1234", text(t, b, "#discard-note"))
}

func TestBrowserShowsScriptInPayloadAsText(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	evil := `{"note":"</pre><script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">"}`
	id := e.emit(t, "orders", "Order", "1", evil, 1)[0]
	d := e.relayLetter(t, "orders", evil)
	b := tab(t)
	for _, page := range []string{"/events/" + id.String(), "/dead-letters/" + strconv.FormatInt(d.ID, 10)} {
		require.NoError(t, chromedp.Do(b, chromedp.Navigate(e.srv.URL+page), chromedp.WaitVisible(chromedp.CSS("#payload"))))
		assert.Contains(t, text(t, b, "#payload"), `</pre><script>window.pwned=1</script>`, page)
		injected, err := chromedp.Run(b, chromedp.Evaluate[bool](`typeof window.pwned !== "undefined" || document.querySelectorAll("main script, main img").length > 0`))
		require.NoError(t, err)
		assert.False(t, injected, "%s: the payload became markup", page)
	}
}

// A form whose CSRF token is removed is refused, and the letter stays open.
func TestBrowserActionWithoutCSRFIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	d := e.relayLetter(t, "orders", `{"order_id":42}`)
	b := tab(t)
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(e.srv.URL+"/dead-letters/"+strconv.FormatInt(d.ID, 10)),
		chromedp.WaitVisible(chromedp.CSS("#retry"))))
	_, err := chromedp.Run(b, chromedp.Evaluate[bool](`document.querySelector('#letter-actions input[name=csrf]').remove(), true`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(b, chromedp.Click(chromedp.CSS("#retry"))))
	require.Eventually(t, func() bool {
		body, err := chromedp.Run(b, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		return err == nil && strings.Contains(body, "no valid CSRF token")
	}, patience, 50*time.Millisecond, "the POST without a CSRF token is refused")
	assert.Equal(t, admin.StateOpen, e.reload(t, d.ID).State())
}

// The screenshots of docs/operations.md: go test ./console -run Screenshots -update-screenshots
// rewrites them; otherwise they are taken and thrown away.
func TestScreenshots(t *testing.T) {
	e := setup(t, console.Config{Refresh: -1})
	for i := range 8 {
		e.emit(t, "orders", "Order", strconv.Itoa(i), `{"order_id":`+strconv.Itoa(i)+`,"amount_cents":4200,"currency":"EUR"}`, 40+i*7)
	}
	e.emit(t, "invoices", "Invoice", "9", `{"invoice_id":9}`, 12)
	ids := e.emit(t, "orders", "Order", "7731", `{"order_id":7731,"amount_cents":4200,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`, 1)
	// Deliveries spread over the last minutes, for the chart.
	_, err := e.db.DB.Exec(`UPDATE outbox_events SET delivered_at = now() - (random() * interval '9 minutes'),
		created_at = now() - interval '10 minutes' WHERE id % 3 <> 0 AND event_id <> $1`, ids[0])
	require.NoError(t, err)
	_, err = e.db.DB.Exec(`UPDATE outbox_events SET delivered_at = now() WHERE event_id = $1`, ids[0])
	require.NoError(t, err)
	e.relayLetter(t, "orders", `{"order_id":42}`)
	_, err = e.ent.ProcessedEvent.Create().SetConsumer("billing").SetEventID(ids[0]).SetEventName("order.paid").Save(context.Background())
	require.NoError(t, err)
	// A consumer's dead letters of one cause, and an aggregate whose
	// publishes failed.
	_, err = e.db.DB.Exec(`INSERT INTO outbox_dead_letters (event_id, source, reason, attempts)
			SELECT gen_random_uuid(), 'billing', 'decoding order ' || g || ': unknown currency "X' || g || '"', 5
			FROM generate_series(1, 12) g;
		UPDATE outbox_events SET last_error = 'publishing: timeout waiting for ack', attempts = 1
		WHERE delivered_at IS NULL AND aggregate_id = '3'`)
	require.NoError(t, err)

	// Two fast relays sharing the partitions (their messages left unread).
	for _, id := range []string{"relay-a", "relay-b"} {
		sub, err := relay.NewSubscriber(e.db.DB, relay.SubscriberConfig{RelayID: id, Partitions: 16})
		require.NoError(t, err)
		_, err = sub.Subscribe(t.Context(), relay.AllTopics)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
	}
	require.Eventually(t, func() bool {
		st, err := admin.ReadStatus(t.Context(), e.db.DB, "", "")
		return err == nil && len(st.Relays) == 2
	}, patience, 50*time.Millisecond, "both relays hold partitions")

	dir := t.TempDir()
	if *updateScreenshots {
		dir = filepath.Join("..", "docs", "screenshots")
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	b := tab(t)
	for name, page := range map[string]string{"overview.png": "/", "event.png": "/events/" + ids[0].String()} {
		require.NoError(t, chromedp.Do(b, chromedp.EmulateViewport(1200, 800), chromedp.Navigate(e.srv.URL+page),
			chromedp.WaitVisible(chromedp.CSS("main"))))
		png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}
}

// With a token, a browser is sent to the login page and, once logged in,
// acts with its session; a wrong token gets nowhere.
func TestBrowserLogsInWithTheToken(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{Token: "s3cret"})
	d := e.relayLetter(t, "orders", `{"order_id":42}`)
	b := tab(t)
	letter := e.srv.URL + "/dead-letters/" + strconv.FormatInt(d.ID, 10)
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(letter)))
	waitFor(t, b, "form.login")
	require.NoError(t, chromedp.Do(b, chromedp.SetValue(chromedp.CSS(`input[name=token]`), "wrong"),
		chromedp.Click(chromedp.CSS(`form.login button`))))
	waitFor(t, b, "p.problem")
	require.NoError(t, chromedp.Do(b, chromedp.SetValue(chromedp.CSS(`input[name=token]`), "s3cret"),
		chromedp.Click(chromedp.CSS(`form.login button`))))
	waitFor(t, b, "#letter-state") // back on the page it asked for
	require.NoError(t, chromedp.Do(b, chromedp.SetValue(chromedp.CSS("#note"), "duplicate of 41"), chromedp.Click(chromedp.CSS("#discard"))))
	waitFor(t, b, "#outcomes")
	assert.Equal(t, admin.StateDiscarded, e.reload(t, d.ID).State())
}

// The Older and Newer links of a search lead to the second and third
// pages and back, keeping the search.
func TestBrowserSearchPagesOlderAndNewer(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	e.emit(t, "orders", "Order", "1", `{"order_id":1}`, 150)
	// Every fifth another event: 120 order.paid, pages of 50, 50 and 20.
	_, err := e.db.DB.Exec(`UPDATE outbox_events SET event_name = 'order.shipped' WHERE id % 5 = 0`)
	require.NoError(t, err)
	var want []string
	rows, err := e.db.DB.Query(`SELECT id FROM outbox_events WHERE event_name = 'order.paid' ORDER BY id DESC`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		want = append(want, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, want, 120)

	b := tab(t)
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(e.srv.URL+"/events?event=order.paid")))
	waitFor(t, b, "#results")
	shown := func() []string {
		t.Helper()
		s, err := chromedp.Run(b, chromedp.Evaluate[string](
			`Array.from(document.querySelectorAll("#results tbody tr td:first-child")).map((td) => td.innerText).join(",")`))
		require.NoError(t, err)
		return strings.Split(s, ",")
	}
	has := func(sel string) bool {
		t.Helper()
		ok, err := chromedp.Run(b, chromedp.Evaluate[bool](`!!document.querySelector(`+strconv.Quote(sel)+`)`))
		require.NoError(t, err)
		return ok
	}
	// follow clicks the link sel and waits for the page it leads to.
	follow := func(sel string) {
		t.Helper()
		from, err := chromedp.Run(b, chromedp.Evaluate[string](`location.href`))
		require.NoError(t, err)
		require.NoError(t, chromedp.Do(b, chromedp.Click(chromedp.CSS(sel))))
		var last string
		ok := assert.Eventually(t, func() bool {
			ok, err := chromedp.Run(b, chromedp.Evaluate[bool](`location.href !== `+strconv.Quote(from)+
				` && document.readyState === "complete" && !!document.querySelector("#results")`))
			if !ok {
				last, _ = chromedp.Run(b, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
			}
			return err == nil && ok
		}, patience, 30*time.Millisecond)
		require.True(t, ok, "following %s from %s led to no results; the page shows: %s", sel, from, last)
		href, err := chromedp.Run(b, chromedp.Evaluate[string](`location.href`))
		require.NoError(t, err)
		assert.Contains(t, href, "event=order.paid", "the link keeps the search")
	}

	assert.Equal(t, want[:50], shown(), "page 1")
	assert.False(t, has("#newer"), "nothing newer than the first page")
	follow("#older")
	assert.Equal(t, want[50:100], shown(), "page 2")
	follow("#older")
	assert.Equal(t, want[100:], shown(), "page 3")
	assert.False(t, has("#older"), "nothing older than the last page")
	follow("#newer")
	assert.Equal(t, want[50:100], shown(), "back to page 2")
	follow("#newer")
	assert.Equal(t, want[:50], shown(), "back to page 1")
	assert.False(t, has("#newer"), "nothing newer than the newest")
	follow("#older")
	assert.Equal(t, want[50:100], shown(), "page 2 again")
}

// The overview lists the open dead letters by source, the relay's first,
// and by reason with ids and numbers replaced: hundreds of letters of one
// cause are one row, and the relay's two are not hidden by them.
func TestBrowserOverviewGroupsDeadLettersBySourceAndReason(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{})
	_, err := e.db.DB.Exec(`INSERT INTO outbox_dead_letters (event_id, source, reason, attempts)
		SELECT gen_random_uuid(), 'billing', 'decoding order ' || g || ': unknown currency "X' || g || '"', 1
		FROM generate_series(1, 200) g;
		INSERT INTO outbox_dead_letters (event_id, source, reason, attempts)
		SELECT gen_random_uuid(), 'billing', 'cause ' || chr(97 + g) || ' of event ' || gen_random_uuid(), 1
		FROM generate_series(1, 25) g;
		INSERT INTO outbox_dead_letters (event_id, source, reason, attempts)
		SELECT gen_random_uuid(), 'relay', 'invalid topic "Orders!"', 5 FROM generate_series(1, 2)`)
	require.NoError(t, err)
	b := tab(t)
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(e.srv.URL+"/")))
	waitFor(t, b, "#letter-reasons")
	table := text(t, b, "#letter-reasons")
	assert.Regexp(t, `^Source\s+Reason\s+Open\s+relay\s+1 reason\s+2\s+invalid topic "…"\s+e\.g\. invalid topic "Orders!"\s+2\s+billing\s+26 reasons\s+225\s+`+
		`decoding order <n>: unknown currency "…"\s+e\.g\. decoding order 200: unknown currency "X200"\s+200\s+`, table)
	assert.Regexp(t, `cause b of event <uuid>\s+e\.g\. cause b of event [0-9a-f-]{36}\s+1\s+`, table)
	assert.Regexp(t, `16 other reasons\s+16$`, strings.TrimSpace(table))
	assert.Equal(t, "227", text(t, b, "#open-letters"))
}

// flakyPublisher fails every publish while fail is set, as a broker that
// stopped acknowledging does, and otherwise publishes to pub.
type flakyPublisher struct {
	fail atomic.Bool
	pub  message.Publisher
}

func (p *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.fail.Load() {
		return errors.New("publishing: timeout waiting for ack")
	}
	return p.pub.Publish(topic, msgs...)
}

func (p *flakyPublisher) Close() error { return nil }

// While a running fast relay's publishes fail, the overview shows the
// failing rows of the topic with their error, and the relay's row says
// "failing: <error>"; once they work again, the rows go and it says live.
func TestBrowserOverviewShowsAFailingRelay(t *testing.T) {
	t.Parallel()
	e := setup(t, console.Config{Refresh: -1})
	ctx := context.Background()
	br, err := broker.Open(ctx, "mem://", broker.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = br.Close() })
	pub := &flakyPublisher{pub: br.Publisher()}
	pub.fail.Store(true)
	e.emit(t, "orders", "Order", "1", `{"order_id":1}`, 5)
	e.emit(t, "orders", "Order", "2", `{"order_id":2}`, 5)
	r, err := relay.New(relay.Config{DB: e.db.DB, Publisher: pub, Path: relay.PathFast, PollInterval: 50 * time.Millisecond,
		RetryInterval: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	// Both aggregates' first rows failed (the others wait behind them).
	require.Eventually(t, func() bool {
		st, err := admin.ReadStatus(ctx, e.db.DB, "", "")
		return err == nil && len(st.Topics) == 1 && st.Topics[0].Failing == 2 && len(st.Relays) == 1
	}, patience, 20*time.Millisecond, "the relay tried and failed")
	b := tab(t)
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(e.srv.URL+"/")))
	waitFor(t, b, "#relays")
	assert.Regexp(t, `orders\s+10\s+\S+ ago\s+2\s+publishing: timeout waiting for ack`, text(t, b, "#topics"))
	assert.Regexp(t, `failing: publishing: timeout waiting for ack \(2 pending rows of its partitions failed last time\)`,
		text(t, b, "#relays"))

	pub.fail.Store(false)
	require.Eventually(t, func() bool {
		st, err := admin.ReadStatus(ctx, e.db.DB, "", "")
		return err == nil && st.Pending == 0
	}, patience, 20*time.Millisecond, "the relay delivered them once the broker took them")
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(e.srv.URL+"/")))
	waitFor(t, b, "#relays")
	relays := text(t, b, "#relays")
	assert.Contains(t, relays, "live")
	assert.NotContains(t, relays, "failing")
}
