package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/heraldmq/herald/client"
)

// The dashboard in a real browser: headless Chromium (Debian's chromium
// package, which `make test` installs when it is missing: the Makefile's
// chromium target) against a real `herald node` process under traffic.

// dashboardScreenshot is where the test leaves its screenshot, shown by
// docs/observability.md.
const dashboardScreenshot = "../../docs/img/dashboard.png"

// chromiumPath finds the browser: $HERALD_CHROMIUM, else chromium on the
// PATH. A machine without one fails the test (make test installs it).
func chromiumPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HERALD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found: `make test` installs Debian's chromium package (make chromium, as root), " +
		"or point HERALD_CHROMIUM at a Chromium or Chrome binary")
	return ""
}

// browser starts headless Chromium with the flags this machine needs (no
// sandbox as root, no GPU, no background networking: the network is
// closed) and a fresh profile, and returns a tab's context. Exceptions the
// page throws and errors it logs are collected in *pageErrors.
func browser(t testing.TB, ctx context.Context, log *pageLog) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1100),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithListener(func(ev any) {
		// Runs in the tab's event loop: record and return.
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			msg = "console.error:"
			for _, a := range e.Args {
				msg += " " + string(a.Value) + a.Description
			}
		default:
			return
		}
		log.add(msg)
	}))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return tab
}

// pageLog collects what the page reports: exceptions and console errors.
type pageLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *pageLog) add(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, msg)
}

func (l *pageLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) == 0 {
		return "(the page reported no error)"
	}
	return strings.Join(l.errs, "\n")
}

// pageNumber reads the number in the data-value attribute of the first
// element matching sel (found false while there is none).
func pageNumber(tab context.Context, sel string) (v float64, found bool, err error) {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.dataset.value : null })()`, sel)
	res, err := chromedp.Run(tab, chromedp.Evaluate[*string](js))
	if err != nil || res == nil || *res == "" {
		return 0, false, err
	}
	v, err = strconv.ParseFloat(*res, 64)
	return v, err == nil, err
}

// waitNumber polls the page until the number at sel satisfies ok, and
// returns it.
func waitNumber(t *testing.T, tab context.Context, sel, what string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	last, seen := 0.0, false
	for time.Now().Before(deadline) {
		v, found, err := pageNumber(tab, sel)
		if err != nil {
			t.Fatalf("%s: reading the page: %v", what, err)
		}
		if found {
			last, seen = v, true
			if ok(v) {
				return v
			}
		}
		time.Sleep(100 * time.Millisecond) // polling the page for a condition, with a deadline
	}
	if !seen {
		t.Fatalf("%s: the page never showed %s", what, sel)
	}
	t.Fatalf("%s: the page still shows %v at %s", what, last, sel)
	return 0
}

// show navigates the tab to url and waits for every selector to be
// visible.
func show(t testing.TB, tab context.Context, log *pageLog, url string, sels ...string) {
	t.Helper()
	steps := []chromedp.Action[chromedp.Void]{chromedp.Navigate(url)}
	for _, sel := range sels {
		steps = append(steps, chromedp.WaitVisible(chromedp.CSS(sel)))
	}
	wait, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(wait, steps...); err != nil {
		text, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v\npage errors: %s\npage text:\n%s", url, err, log, text)
	}
	// What a rendering slip prints: an element, an array or a missing
	// figure turned into text.
	text, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	for _, slip := range []string{"[object ", "undefined", "NaN", ",http"} {
		if strings.Contains(text, slip) {
			t.Fatalf("%s shows %q:\n%s", url, slip, text)
		}
	}
}

func TestDashboardInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := startNode(t, t.TempDir())
	c := node.dial(t)
	orders := client.StreamName{Tenant: "default", Namespace: "shop", Stream: "orders"}
	payments := client.StreamName{Tenant: "default", Namespace: "shop", Stream: "payments"}
	if _, err := c.CreateStream(ctx, orders, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateStream(ctx, payments, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}

	// Traffic: a publisher on both streams (paused while the group
	// drains), a subscriber on orders, and a push member of group
	// "auditors" acking what it gets.
	var paused atomic.Bool
	var published atomic.Int64
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopTraffic()
		wg.Wait()
	}()
	wg.Add(3)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-trafficCtx.Done():
				return
			case <-tick.C:
			}
			if paused.Load() {
				continue
			}
			batch := make([][]byte, 16)
			for j := range batch {
				batch[j] = fmt.Appendf(nil, "order %d-%d", i, j)
			}
			if _, err := c.PublishBatch(trafficCtx, orders, batch, client.WithKey(fmt.Appendf(nil, "k%d", i))); err == nil {
				published.Add(int64(len(batch)))
			}
			if i%4 == 0 {
				_, _ = c.PublishBatch(trafficCtx, payments, batch[:4])
			}
		}
	}()
	sub, err := c.Subscribe(ctx, orders, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	go func() {
		defer wg.Done()
		for {
			if _, err := sub.Next(trafficCtx); err != nil {
				return
			}
		}
	}()
	auditor, err := c.Group(orders, "auditors").Subscribe(ctx, client.WithMember("auditor-1"), client.WithWindow(64))
	if err != nil {
		t.Fatal(err)
	}
	defer auditor.Close()
	go func() {
		defer wg.Done()
		for {
			d, err := auditor.Next(trafficCtx)
			if err != nil {
				return
			}
			if err := auditor.Ack(trafficCtx, d); err != nil && !errors.Is(err, context.Canceled) {
				return
			}
		}
	}()
	// Group "workers" exists from its first poll and then falls behind.
	workers := c.Group(orders, "workers")
	claimed, err := workers.Poll(ctx, 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}

	log := &pageLog{}
	tab := browser(t, ctx, log)
	base := "http://" + node.http + "/"

	// The streams list shows both streams, and orders' tail grows as
	// records are published.
	show(t, tab, log, base+"#/streams", `tr[data-stream="default/shop/orders"]`, `tr[data-stream="default/shop/payments"]`)
	tailSel := `#streams tr[data-stream="default/shop/orders"] td[data-col="tail"]`
	tail1 := waitNumber(t, tab, tailSel, "orders' tail", func(v float64) bool { return v > 0 })
	waitNumber(t, tab, tailSel, "orders' tail after more publishes", func(v float64) bool { return v > tail1 })

	// The groups list shows workers behind the tail, and its lag grows.
	show(t, tab, log, base+"#/groups", `tr[data-group="default/shop/orders/workers"]`)
	lagSel := `#groups tr[data-group="default/shop/orders/workers"] td[data-col="lag"]`
	lag1 := waitNumber(t, tab, lagSel, "workers' lag", func(v float64) bool { return v > 0 })
	waitNumber(t, tab, lagSel, "workers' lag while publishing", func(v float64) bool { return v > lag1 })

	// Publishing pauses and workers consumes and acks everything: the
	// page's lag falls to 0.
	paused.Store(true)
	if len(claimed) > 0 {
		if _, err := workers.Ack(ctx, claimed...); err != nil {
			t.Fatal(err)
		}
	}
	drainGroup(t, ctx, workers)
	waitNumber(t, tab, lagSel, "workers' lag once acked", func(v float64) bool { return v == 0 })

	// The group's own page: per-shard lag and the auditors' member.
	show(t, tab, log, base+"#/group/default/shop/orders/auditors", `#members`, `#group-shards`)
	waitNumber(t, tab, `#members td[data-col="in_flight"]`, "auditor's in-flight", func(v float64) bool { return v >= 0 })

	// The stream's page: its configuration, shards and groups.
	show(t, tab, log, base+"#/stream/default/shop/orders", `#shards tbody tr`, `#stream-groups`)

	// A shard's subscriptions: the subscriber's queue against its bounds.
	show(t, tab, log, base+"#/stream/default/shop/orders/shard/0", `#subscriptions tbody tr`)
	waitNumber(t, tab, `#subscriptions td[data-col="delivered_batches"]`, "subscriber's deliveries", func(v float64) bool { return v >= 0 })

	// The overview, under traffic again: the published total grows and the
	// charts fill; its screenshot goes in the docs.
	paused.Store(false)
	show(t, tab, log, base+"#/", `#charts canvas`, `#top-groups`)
	pubSel := `#top-streams tr[data-stream="default/shop/orders"] td[data-col="publish_records_per_second"]`
	waitNumber(t, tab, pubSel, "orders' publish rate on the overview", func(v float64) bool { return v > 0 })
	start := published.Load()
	for published.Load() < start+3000 {
		select {
		case <-ctx.Done():
			t.Fatal("traffic stopped")
		case <-time.After(100 * time.Millisecond):
		}
	}
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 10_000 {
		t.Fatalf("screenshot is only %d bytes", len(png))
	}
	if err := os.MkdirAll(filepath.Dir(dashboardScreenshot), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dashboardScreenshot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.errs) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(log.errs, "\n"))
	}
}

// drainGroup polls and acks g until its committed cursors reach the
// shards' tails.
func drainGroup(t *testing.T, ctx context.Context, g *client.Group) {
	t.Helper()
	for {
		info, err := g.Describe(ctx)
		if err != nil {
			t.Fatalf("describe: %v", err)
		}
		behind := false
		for _, s := range info.Shards {
			if s.Committed >= s.Tail {
				continue
			}
			behind = true
			recs, err := g.Poll(ctx, s.Shard, 500, 500*time.Millisecond)
			if err != nil {
				t.Fatalf("poll shard %d: %v", s.Shard, err)
			}
			if len(recs) > 0 {
				if _, err := g.Ack(ctx, recs...); err != nil {
					t.Fatalf("ack shard %d: %v", s.Shard, err)
				}
			}
		}
		if !behind {
			return
		}
	}
}

// With tokens on, the page asks for one, and shows that token's tenant
// only: the login form, then acme's streams and none of globex's; logging
// out brings the form back.
func TestDashboardLoginInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const acmeToken, globexToken = "acme-dashboard-token-0123456789", "globex-dashboard-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(`tokens:
  - {name: acme-ops, tenant: acme, token: `+acmeToken+`, permissions: [publish, subscribe, consume, manage]}
  - {name: globex-ops, tenant: globex, token: `+globexToken+`, permissions: [publish, subscribe, consume, manage]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	node := startNode(t, t.TempDir(), "HERALD_AUTH_TOKENS_FILE="+tokens)
	for tenant, token := range map[string]string{"acme": acmeToken, "globex": globexToken} {
		c := node.dial(t, client.WithToken(token))
		for _, s := range []string{"orders", tenant + "-ledger"} {
			name := client.StreamName{Tenant: tenant, Namespace: "shop", Stream: s}
			if _, err := c.CreateStream(ctx, name, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.PublishBatch(ctx, name, [][]byte{[]byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	log := &pageLog{}
	tab := browser(t, ctx, log)
	base := "http://" + node.http + "/"
	show(t, tab, log, base+"#/streams", `#login #token`)
	if err := chromedp.Do(tab, chromedp.SendKeys(chromedp.CSS("#token"), acmeToken), chromedp.Click(chromedp.CSS("#login button"))); err != nil {
		t.Fatal(err)
	}
	show(t, tab, log, base+"#/streams", `#streams tr[data-stream="acme/shop/orders"]`)
	// The login is a cookie: a new load of the page is still logged in.
	show(t, tab, log, "about:blank")
	show(t, tab, log, base+"#/streams", `#streams tr[data-stream="acme/shop/orders"]`, `#streams tr[data-stream="acme/shop/acme-ledger"]`)
	text, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#streams tbody tr").length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows != 2 || strings.Contains(text, "globex") || !strings.Contains(text, "tenant acme") {
		t.Errorf("acme's page shows %d streams; its text:\n%s", rows, text)
	}
	// Logging out ends it.
	show(t, tab, log, base+"#/", `#cards`)
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS("#who button"))); err != nil {
		t.Fatal(err)
	}
	show(t, tab, log, base+"#/", `#login #token`)
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, e := range log.errs {
		// The browser logs the 401 that tells the page to ask for a token.
		if !strings.Contains(e, "401") {
			t.Errorf("the page reported: %s", e)
		}
	}
}
