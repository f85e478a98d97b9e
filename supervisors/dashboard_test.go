package supervisors

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heraldmq/herald/client"
)

// dashNode starts a node whose dashboard samples only when the test says
// (tick).
type dashNode struct {
	*Node
	ticks chan time.Time
	now   time.Time
}

func startDashNode(t *testing.T, mutate ...func(*Config, *Options)) *dashNode {
	t.Helper()
	d := &dashNode{ticks: make(chan time.Time), now: time.Now()}
	d.Node = testNode(t, t.TempDir(), append([]func(*Config, *Options){func(_ *Config, o *Options) { o.DashboardTicks = d.ticks }}, mutate...)...)
	return d
}

// tick makes the dashboard sample at the node's clock plus step, and
// waits until the sample is there.
func (d *dashNode) tick(t *testing.T, step time.Duration) {
	t.Helper()
	d.now = d.now.Add(step)
	select {
	case d.ticks <- d.now:
	case <-time.After(10 * time.Second):
		t.Fatal("the dashboard's sampler did not take the tick")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !d.dash.snap.Load().at.Equal(d.now) {
		if time.Now().After(deadline) {
			t.Fatal("the dashboard did not sample")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}

// apiCall is one request to the dashboard's API.
type apiCall struct {
	method, path, token string
	cookie              *http.Cookie
	body                string
	contentType         string
}

// do sends the call and returns the status, the body, and the response.
func (d *dashNode) do(t *testing.T, c apiCall) (int, string, *http.Response) {
	t.Helper()
	if c.method == "" {
		c.method = http.MethodGet
	}
	req, err := http.NewRequest(c.method, "http://"+d.HTTPAddr()+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp
}

// get GETs path with token, wants status 200 and decodes the body into
// out; it returns the body.
func (d *dashNode) get(t *testing.T, path, token string, out any) string {
	t.Helper()
	status, body, _ := d.do(t, apiCall{path: path, token: token})
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, status, body)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(body), out); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
	return body
}

// firstEvent reads the first event of /api/v1/events.
func (d *dashNode) firstEvent(t *testing.T, token string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.HTTPAddr()+"/api/v1/events", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sawEvent := false
	for sc.Scan() {
		line := sc.Text()
		if line == "event: node" {
			sawEvent = true
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && sawEvent {
			return data
		}
	}
	t.Fatalf("events: no event (%v)", sc.Err())
	return ""
}

type streamsPage struct {
	Total int         `json:"total"`
	Rows  []streamRow `json:"rows"`
}

type groupsPage struct {
	Total int        `json:"total"`
	Rows  []groupRow `json:"rows"`
}

// A token of one tenant sees nothing of another's through the dashboard's
// API: not its streams, groups, subscriptions or figures, not even whether
// a stream exists; a namespaced token sees only its namespaces; without a
// valid token or login nothing is served; a login cookie works like the
// token and cannot be forged.
func TestDashboardTenantIsolation(t *testing.T) {
	d := startDashNode(t, func(c *Config, _ *Options) { c.AuthTokensFile = writeTokens(t) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tenants := map[string]string{"acme": tokenAcme, "globex": tokenGlobex}
	for tenant, token := range tenants {
		c := dialClient(t, d.Node, client.WithToken(token))
		orders := client.StreamName{Tenant: tenant, Namespace: "shop", Stream: "orders"}
		private := client.StreamName{Tenant: tenant, Namespace: "private", Stream: tenant + "-plans"}
		for _, s := range []client.StreamName{orders, private} {
			if _, err := c.CreateStream(ctx, s, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.PublishBatch(ctx, s, [][]byte{[]byte("one"), []byte("two")}); err != nil {
				t.Fatal(err)
			}
		}
		sub, err := c.Subscribe(ctx, orders, client.WithStartEarliest(), client.WithShard(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		if _, err := c.Group(orders, tenant+"-workers").Poll(ctx, 0, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	d.tick(t, time.Second)
	d.tick(t, time.Second)

	for tenant, token := range tenants {
		other := "globex"
		if tenant == "globex" {
			other = "acme"
		}
		var bodies []string
		var who whoami
		bodies = append(bodies, d.get(t, "/api/v1/whoami", token, &who))
		if who.Tenant != tenant || who.Scope != "tenant" || who.Auth != "tokens" {
			t.Errorf("%s whoami = %+v", tenant, who)
		}
		var streams streamsPage
		bodies = append(bodies, d.get(t, "/api/v1/streams", token, &streams))
		if streams.Total != 2 || len(streams.Rows) != 2 {
			t.Errorf("%s sees %d streams, want its 2: %+v", tenant, streams.Total, streams.Rows)
		}
		for _, r := range streams.Rows {
			if !strings.HasPrefix(r.Name, tenant+"/") {
				t.Errorf("%s sees stream %s", tenant, r.Name)
			}
		}
		bodies = append(bodies, d.get(t, "/api/v1/streams?q="+other, token, &streams))
		if streams.Total != 0 {
			t.Errorf("%s finds %d streams named like %s", tenant, streams.Total, other)
		}
		var groups groupsPage
		bodies = append(bodies, d.get(t, "/api/v1/groups", token, &groups))
		if groups.Total != 1 || groups.Rows[0].Group != tenant+"-workers" {
			t.Errorf("%s sees groups %+v", tenant, groups.Rows)
		}
		var node nodeView
		body := d.get(t, "/api/v1/node?series=1", token, &node)
		bodies = append(bodies, body)
		if node.Scope != "tenant" || node.Tenant != tenant || node.Node != nil || strings.Contains(body, `"node":{`) {
			t.Errorf("%s node view: scope %q tenant %q node figures %v", tenant, node.Scope, node.Tenant, node.Node != nil)
		}
		if node.Totals.Streams != 2 || node.Totals.Shards != 4 || node.Totals.Groups != 1 || node.Totals.Subscriptions != 1 || node.Totals.PublishedRecords != 4 {
			t.Errorf("%s totals = %+v, want its own only", tenant, node.Totals)
		}
		if node.Series == nil || len(node.Series.T) < 2 || node.Series.HeapBytes != nil {
			t.Errorf("%s series = %+v", tenant, node.Series)
		}
		bodies = append(bodies, d.get(t, "/api/v1/streams/"+tenant+"/shop/orders", token, nil))
		bodies = append(bodies, d.get(t, "/api/v1/streams/"+tenant+"/shop/orders/shards/0/subscriptions", token, nil))
		bodies = append(bodies, d.get(t, "/api/v1/groups/"+tenant+"/shop/orders/"+tenant+"-workers", token, nil))
		bodies = append(bodies, d.get(t, "/api/v1/cluster", token, nil))
		bodies = append(bodies, d.firstEvent(t, token))
		for _, b := range bodies {
			if strings.Contains(b, other) {
				t.Errorf("%s's view mentions %s: %s", tenant, other, b)
			}
		}
		// The other tenant's streams and groups, existing or not: refused
		// alike, by name.
		for _, path := range []string{
			"/api/v1/streams/" + other + "/shop/orders",
			"/api/v1/streams/" + other + "/private/" + other + "-plans",
			"/api/v1/streams/" + other + "/nothing/here",
			"/api/v1/streams/" + other + "/shop/orders/shards/0/subscriptions",
			"/api/v1/groups/" + other + "/shop/orders/" + other + "-workers",
			"/api/v1/groups/" + other + "/shop/orders/nobody",
		} {
			status, body, _ := d.do(t, apiCall{path: path, token: token})
			if status != http.StatusForbidden || !strings.Contains(body, `"code":"permission_denied"`) {
				t.Errorf("%s GET %s: %d %s, want 403 permission_denied", tenant, path, status, body)
			}
			for _, word := range []string{"plans", "workers", "orders"} {
				if strings.Contains(body, word) && !strings.Contains(path, word) {
					t.Errorf("%s GET %s tells more than the name asked: %s", tenant, path, body)
				}
			}
		}
	}

	// A token limited to acme's shop namespace, with publish only.
	var streams streamsPage
	d.get(t, "/api/v1/streams", tokenShopPub, &streams)
	if streams.Total != 1 || streams.Rows[0].Name != "acme/shop/orders" {
		t.Errorf("the shop publisher sees %+v, want acme/shop/orders alone", streams.Rows)
	}
	if status, body, _ := d.do(t, apiCall{path: "/api/v1/streams/acme/private/acme-plans", token: tokenShopPub}); status != http.StatusForbidden {
		t.Errorf("the shop publisher reads another namespace: %d %s", status, body)
	}
	if status, body, _ := d.do(t, apiCall{path: "/api/v1/groups", token: tokenShopPub}); status != http.StatusForbidden {
		t.Errorf("a publish-only token lists groups: %d %s", status, body)
	}
	// Nor does it see the groups' figures anywhere else (acme-workers is
	// on acme/shop/orders), or sort by them.
	if r := streams.Rows[0]; r.Groups != 0 || r.GroupLag != 0 {
		t.Errorf("a publish-only token sees the stream's groups: %d, lag %d", r.Groups, r.GroupLag)
	}
	if status, body, _ := d.do(t, apiCall{path: "/api/v1/streams?sort=group_lag", token: tokenShopPub}); status != http.StatusForbidden {
		t.Errorf("a publish-only token sorts by group lag: %d %s", status, body)
	}
	var pubNode nodeView
	d.get(t, "/api/v1/node?series=1", tokenShopPub, &pubNode)
	if pubNode.Totals.Groups != 0 || pubNode.Totals.Members != 0 || pubNode.Totals.GroupLag != 0 || pubNode.Sample.GroupLag != 0 ||
		pubNode.Series == nil || slices.ContainsFunc(pubNode.Series.GroupLag, func(l int64) bool { return l != 0 }) {
		t.Errorf("a publish-only token sees group figures: totals %+v sample %+v", pubNode.Totals, pubNode.Sample)
	}
	var detail streamView
	d.get(t, "/api/v1/streams/acme/shop/orders", tokenShopPub, &detail)
	if detail.Row == nil || detail.Row.Groups != 0 || detail.Row.GroupLag != 0 || len(detail.Groups) != 0 {
		t.Errorf("a publish-only token sees the stream's groups in its detail: %+v %+v", detail.Row, detail.Groups)
	}
	var adminDetail streamView
	d.get(t, "/api/v1/streams/acme/shop/orders", tokenAcme, &adminDetail)
	if adminDetail.Row == nil || adminDetail.Row.Groups != 1 || len(adminDetail.Groups) != 1 {
		t.Errorf("acme's own token does not see the stream's group: %+v %+v", adminDetail.Row, adminDetail.Groups)
	}

	// No credentials, wrong ones: nothing.
	for _, c := range []apiCall{
		{path: "/api/v1/streams"},
		{path: "/api/v1/node"},
		{path: "/api/v1/events"},
		{path: "/api/v1/groups", token: "not-a-token-of-this-node-at-all"},
		{path: "/api/v1/streams/acme/shop/orders", token: "not-a-token-of-this-node-at-all"},
	} {
		if status, body, _ := d.do(t, c); status != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthenticated"`) {
			t.Errorf("GET %s (token %q): %d %s, want 401", c.path, c.token, status, body)
		}
	}

	// A login: the cookie stands for the token, and nothing else does.
	status, body, _ := d.do(t, apiCall{method: http.MethodPost, path: "/api/v1/login", body: `{"token":"` + tokenAcme + `"}`, contentType: "text/plain"})
	if status != http.StatusUnsupportedMediaType {
		t.Errorf("a login that is not JSON: %d %s", status, body)
	}
	status, body, _ = d.do(t, apiCall{method: http.MethodPost, path: "/api/v1/login", body: `{"token":"wrong-token-but-long-enough"}`, contentType: "application/json"})
	if status != http.StatusUnauthorized {
		t.Errorf("a login with a wrong token: %d %s", status, body)
	}
	status, body, resp := d.do(t, apiCall{method: http.MethodPost, path: "/api/v1/login", body: `{"token":"` + tokenAcme + `"}`, contentType: "application/json"})
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			cookie = c
		}
	}
	if status != http.StatusOK || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d %s, cookie %+v", status, body, cookie)
	}
	if strings.Contains(cookie.Value, tokenAcme) {
		t.Error("the login cookie holds the token")
	}
	status, body, _ = d.do(t, apiCall{path: "/api/v1/streams", cookie: cookie})
	if status != http.StatusOK || !strings.Contains(body, "acme/shop/orders") || strings.Contains(body, "globex") {
		t.Errorf("streams with the login cookie: %d %s", status, body)
	}
	forged := *cookie
	forged.Value = cookie.Value[:len(cookie.Value)-2] + "AA"
	if status, body, _ := d.do(t, apiCall{path: "/api/v1/streams", cookie: &forged}); status != http.StatusUnauthorized {
		t.Errorf("a forged cookie: %d %s", status, body)
	}
	if status, _, resp := d.do(t, apiCall{method: http.MethodPost, path: "/api/v1/logout", cookie: cookie, contentType: "application/x-www-form-urlencoded"}); status != http.StatusUnsupportedMediaType || len(resp.Cookies()) != 0 {
		t.Errorf("a logout a cross-site form could send: %d, cookies %+v", status, resp.Cookies())
	}
	status, _, resp = d.do(t, apiCall{method: http.MethodPost, path: "/api/v1/logout", cookie: cookie, contentType: "application/json"})
	if status != http.StatusNoContent || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Errorf("logout: %d, cookies %+v", status, resp.Cookies())
	}
}

// The dashboard's figures follow the traffic: a stream's tail, totals and
// rates, its shard's subscription with its queue bounds and deliveries, a
// group's lag and claims falling as records are acked; lists sort, filter
// and page.
func TestDashboardFollowsTraffic(t *testing.T) {
	d := startDashNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialClient(t, d.Node)
	orders := client.StreamName{Tenant: "default", Namespace: "dash", Stream: "orders"}
	if _, err := c.CreateStream(ctx, orders, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, orders, client.WithStartEarliest(), client.WithQueueCapacity(64))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	d.tick(t, time.Second)
	payload := []byte(strings.Repeat("x", 100))
	for range 10 {
		batch := make([][]byte, 10)
		for j := range batch {
			batch[j] = payload
		}
		if _, err := c.PublishBatch(ctx, orders, batch); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	// The lane's completions reach the subscription just after the client
	// has the records.
	deadline := time.Now().Add(10 * time.Second)
	for d.stats.Stream("default/dash/orders").DeliveredBatches.Load() < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	d.tick(t, 2*time.Second)

	var streams streamsPage
	d.get(t, "/api/v1/streams", "", &streams)
	if streams.Total != 1 {
		t.Fatalf("streams: %+v", streams)
	}
	r := streams.Rows[0]
	if r.Name != "default/dash/orders" || r.Tail != 100 || r.First != 0 || r.Records != 100 || r.PublishedRecords != 100 ||
		r.PublishRecords != 50 || r.PublishBytes != float64(r.PublishedBytes)/2 || r.DeliveredBatches != 5 ||
		r.DeliveredBytes != float64(r.PublishedBytes)/2 || r.Subscriptions != 1 {
		t.Errorf("row = %+v; want tail 100, 50 records/s and 5 batches/s over the 2 s tick", r)
	}
	var node nodeView
	d.get(t, "/api/v1/node?series=1", "", &node)
	if node.Scope != "node" || node.Node == nil || node.Node.Connections < 1 || node.Node.HeapBytes <= 0 || node.Node.StorageBytes <= 0 {
		t.Errorf("node view: %+v", node.Node)
	}
	if node.Node.CommitP99 <= 0 || node.Node.AckP99 <= 0 || node.Node.PublishedRecords != 100 {
		t.Errorf("node latency and totals: %+v", node.Node)
	}
	if n := len(node.Series.T); n < 3 || node.Series.PublishRecords[n-1] != 50 || node.Sample.PublishRecords != 50 {
		t.Errorf("series: %+v, sample %+v", node.Series, node.Sample)
	}

	var stream streamView
	d.get(t, "/api/v1/streams/default/dash/orders", "", &stream)
	if len(stream.Shards) != 1 || !stream.Shards[0].Ready || stream.Shards[0].Tail != 100 || stream.Shards[0].Subscriptions != 1 || stream.Shards[0].Live != 1 {
		t.Errorf("stream detail: %+v", stream.Shards)
	}
	var subs subscriptionsPage
	d.get(t, "/api/v1/streams/default/dash/orders/shards/0/subscriptions", "", &subs)
	if subs.Total != 1 || len(subs.Rows) != 1 {
		t.Fatalf("subscriptions: %+v", subs)
	}
	s := subs.Rows[0]
	if !s.Answered || s.Capacity != 64 || s.Next != 100 || s.DeliveredBatches != 10 || s.DeliveredBytes != r.PublishedBytes || s.Principal != "dev" || s.Client == "" || !s.Live {
		t.Errorf("subscription: %+v", s)
	}
	if status, body, _ := d.do(t, apiCall{path: "/api/v1/streams/default/dash/orders/shards/1/subscriptions"}); status != http.StatusNotFound {
		t.Errorf("shard 1 of a 1-shard stream: %d %s", status, body)
	}

	// A group that claims 5 records and acks them.
	g := c.Group(orders, "workers")
	recs, err := g.Poll(ctx, 0, 5, time.Second)
	if err != nil || len(recs) != 5 {
		t.Fatalf("poll: %d records, %v", len(recs), err)
	}
	d.tick(t, time.Second)
	var group groupView
	d.get(t, "/api/v1/groups/default/dash/orders/workers", "", &group)
	if group.Lag != 100 || group.Claims != 5 || len(group.Shards) != 1 || group.Shards[0].Delivered != 5 {
		t.Errorf("group before the acks: %+v", group)
	}
	var groups groupsPage
	d.get(t, "/api/v1/groups", "", &groups)
	if groups.Total != 1 || groups.Rows[0].Lag != 100 || groups.Rows[0].Claims != 5 {
		t.Errorf("groups before the acks: %+v", groups.Rows)
	}
	if _, err := g.Ack(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	d.get(t, "/api/v1/groups/default/dash/orders/workers", "", &group)
	if group.Lag != 95 || group.Claims != 0 || group.Shards[0].Committed != 5 {
		t.Errorf("group after the acks: %+v", group)
	}
	d.tick(t, time.Second)
	d.get(t, "/api/v1/groups", "", &groups)
	if groups.Rows[0].Lag != 95 || groups.Rows[0].Claims != 0 {
		t.Errorf("groups after the acks: %+v", groups.Rows)
	}
	if status, body, _ := d.do(t, apiCall{path: "/api/v1/groups/default/dash/orders/nobody"}); status != http.StatusNotFound {
		t.Errorf("a group never used: %d %s", status, body)
	}

	// Sorting, filtering and paging, done by the node.
	for i, n := range []int{3, 1, 2} {
		name := client.StreamName{Tenant: "default", Namespace: "dash", Stream: fmt.Sprintf("s%d", i)}
		for range n {
			if _, err := c.PublishBatch(ctx, name, [][]byte{payload}); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.tick(t, time.Second)
	d.get(t, "/api/v1/streams?sort=tail&order=desc&limit=2", "", &streams)
	if streams.Total != 4 || len(streams.Rows) != 2 || streams.Rows[0].Name != "default/dash/orders" || streams.Rows[1].Name != "default/dash/s0" {
		t.Errorf("by tail, descending, first page: %+v", streams.Rows)
	}
	d.get(t, "/api/v1/streams?sort=tail&order=desc&limit=2&offset=2", "", &streams)
	if len(streams.Rows) != 2 || streams.Rows[0].Name != "default/dash/s2" || streams.Rows[1].Name != "default/dash/s1" {
		t.Errorf("by tail, descending, second page: %+v", streams.Rows)
	}
	d.get(t, "/api/v1/streams?q=S1", "", &streams)
	if streams.Total != 1 || streams.Rows[0].Name != "default/dash/s1" {
		t.Errorf("filtered by s1: %+v", streams.Rows)
	}
	for _, bad := range []string{"?sort=nope", "?order=up", "?limit=0", "?limit=100000", "?offset=-1"} {
		if status, body, _ := d.do(t, apiCall{path: "/api/v1/streams" + bad}); status != http.StatusBadRequest {
			t.Errorf("GET /api/v1/streams%s: %d %s, want 400", bad, status, body)
		}
	}
}

// With dashboard: false the listener serves neither the page nor the API.
func TestDashboardOff(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.Dashboard = false })
	for _, path := range []string{"/", "/api/v1/node", "/assets/app.js"} {
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// The page and its assets are served from the binary, with a policy that
// allows nothing from elsewhere.
func TestDashboardPage(t *testing.T) {
	d := startDashNode(t)
	for path, want := range map[string]string{"/": "text/html", "/assets/app.js": "javascript", "/assets/style.css": "text/css"} {
		status, body, resp := d.do(t, apiCall{path: path})
		if status != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), want) || len(body) < 100 {
			t.Errorf("GET %s: %d %s", path, status, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
	}
	if status, _, _ := d.do(t, apiCall{path: "/nothing"}); status != http.StatusNotFound {
		t.Errorf("GET /nothing: %d", status)
	}
}

// One tenant cannot take every event stream from the others: past
// dashMaxScopeEventStreams of its own it is refused (503 overloaded, the
// page then polls), while another tenant still gets one; a stream the
// client leaves gives its place back.
func TestDashboardEventStreamsPerTenant(t *testing.T) {
	d := startDashNode(t, func(c *Config, _ *Options) { c.AuthTokensFile = writeTokens(t) })
	open := func(token string) (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.HTTPAddr()+"/api/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		return resp, func() { cancel(); _ = resp.Body.Close() }
	}
	var closers []context.CancelFunc
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for i := range dashMaxScopeEventStreams {
		resp, done := open(tokenAcme)
		closers = append(closers, done)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("acme's event stream %d: %d", i+1, resp.StatusCode)
		}
	}
	resp, done := open(tokenAcme)
	body, _ := io.ReadAll(resp.Body)
	done()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"overloaded"`) {
		t.Fatalf("acme's event stream past its share: %d %s", resp.StatusCode, body)
	}
	if data := d.firstEvent(t, tokenGlobex); !strings.Contains(data, `"tenant":"globex"`) {
		t.Errorf("globex's event stream beside acme's: %s", data)
	}
	// acme leaves one stream: the node sees it go and takes a new one.
	closers[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, done := open(tokenAcme)
		closers = append(closers, done)
		if resp.StatusCode == http.StatusOK {
			break
		}
		done()
		if time.Now().After(deadline) {
			t.Fatalf("acme's stream never came back after it closed one: %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond) // polling for the handler's exit, with a deadline
	}
}

// An event stream ends when its login does: the credentials are checked
// again at every event, not only when the stream opened.
func TestDashboardEventStreamEndsWithItsLogin(t *testing.T) {
	d := startDashNode(t, func(c *Config, _ *Options) { c.AuthTokensFile = writeTokens(t) })
	_, _, resp := d.do(t, apiCall{method: http.MethodPost, path: "/api/v1/login", body: `{"token":"` + tokenAcme + `"}`, contentType: "application/json"})
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatal("no login cookie")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.HTTPAddr()+"/api/v1/events", nil)
	req.AddCookie(cookie)
	events, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()
	if events.StatusCode != http.StatusOK {
		t.Fatalf("events with the login: %d", events.StatusCode)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(events.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if sc.Text() == "event: node" {
				lines <- sc.Text()
			}
		}
	}()
	next := func() (string, bool) {
		select {
		case l, ok := <-lines:
			return l, ok
		case <-ctx.Done():
			t.Fatal("no event and no end")
			return "", false
		}
	}
	if _, ok := next(); !ok {
		t.Fatal("the stream ended before its first event")
	}
	d.tick(t, time.Second)
	if _, ok := next(); !ok {
		t.Fatal("the stream ended while its login was good")
	}
	d.dash.skew.Store(int64(sessionTTL + time.Minute)) // the login has expired
	d.tick(t, time.Second)
	if _, ok := next(); ok {
		t.Fatal("the stream went on after its login expired")
	}
}
