package supervisors

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/wire"
)

// The dashboard's JSON API, under /api/v1/ on the node's HTTP listener
// (docs/observability.md is its reference). Every answer is JSON; a refusal
// is {"error": ..., "code": ...} with an HTTP status.

// Page bounds of the list endpoints.
const (
	defaultPageLimit = 50
	maxPageLimit     = 500
	// maxSubscriptionPage bounds a subscriptions page: each row asks one
	// subscription actor.
	maxSubscriptionPage = 200
	// maxClusterPage bounds a page of replicated shards: each row asks one
	// shard.
	maxClusterPage = 200
	// apiAskTimeout bounds each actor request an API call makes.
	apiAskTimeout = 2 * time.Second
)

// routes registers the dashboard's page and API on mux.
func (d *dashboard) routes(mux *http.ServeMux) {
	api := func(pattern string, h func(w http.ResponseWriter, r *http.Request, p actors.Principal)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			d.used()
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			p, aerr := d.principal(r)
			if aerr != nil {
				writeError(w, aerr)
				return
			}
			h(w, r, p)
		})
	}
	api("GET /api/v1/whoami", func(w http.ResponseWriter, _ *http.Request, p actors.Principal) {
		writeJSON(w, http.StatusOK, d.whoamiOf(p))
	})
	mux.HandleFunc("POST /api/v1/login", d.serveLogin)
	mux.HandleFunc("POST /api/v1/logout", d.serveLogout)
	api("GET /api/v1/node", d.serveNode)
	api("GET /api/v1/events", d.serveEvents)
	api("GET /api/v1/streams", d.serveStreams)
	api("GET /api/v1/streams/{tenant}/{namespace}/{stream}", d.serveStream)
	api("GET /api/v1/streams/{tenant}/{namespace}/{stream}/shards/{shard}/subscriptions", d.serveSubscriptions)
	api("GET /api/v1/groups", d.serveGroups)
	api("GET /api/v1/groups/{tenant}/{namespace}/{stream}/{group}", d.serveGroup)
	api("GET /api/v1/cluster", d.serveCluster)
	d.assetRoutes(mux)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers a refusal.
func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]string{"error": e.message, "code": e.code})
}

// badRequest is a refusal of a malformed query.
func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: wire.CodeInvalidRequest.String(), message: fmt.Sprintf(format, args...)}
}

// pageQuery is a list endpoint's query: filter, sort and page.
type pageQuery struct {
	// Q keeps rows whose name holds it (case-insensitive).
	Q      string
	Sort   string
	Desc   bool
	Offset int
	Limit  int
}

// parsePage reads q, sort, order, offset and limit; sorts are the keys
// allowed (the first is the default) and maxLimit caps limit.
func parsePage(r *http.Request, sorts []string, maxLimit int) (pageQuery, *apiError) {
	v := r.URL.Query()
	q := pageQuery{Q: strings.ToLower(v.Get("q")), Sort: v.Get("sort"), Limit: defaultPageLimit}
	if q.Sort == "" {
		q.Sort = sorts[0]
	} else if !slices.Contains(sorts, q.Sort) {
		return q, badRequest("sort must be one of %s, got %q", strings.Join(sorts, ", "), q.Sort)
	}
	switch v.Get("order") {
	case "", "asc":
	case "desc":
		q.Desc = true
	default:
		return q, badRequest("order must be asc or desc, got %q", v.Get("order"))
	}
	num := func(key string, dst *int, lo, hi int) *apiError {
		s := v.Get(key)
		if s == "" {
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return badRequest("%s must be a number from %d to %d, got %q", key, lo, hi, s)
		}
		*dst = n
		return nil
	}
	if e := num("offset", &q.Offset, 0, 1<<30); e != nil {
		return q, e
	}
	if e := num("limit", &q.Limit, 1, maxLimit); e != nil {
		return q, e
	}
	return q, nil
}

// pageOf filters rows with keep, sorts them by the query's key (ties by
// name, so the order is total) and returns a copy of the page and how many
// rows passed the filter. It sorts pointers: 1,000 rows sort in well under
// a millisecond.
func pageOf[T any](rows []T, q pageQuery, keep func(*T) bool, name func(*T) string, keys map[string]func(a, b *T) int) ([]T, int) {
	kept := make([]*T, 0, len(rows))
	for i := range rows {
		if keep(&rows[i]) && (q.Q == "" || strings.Contains(strings.ToLower(name(&rows[i])), q.Q)) {
			kept = append(kept, &rows[i])
		}
	}
	by := keys[q.Sort]
	slices.SortFunc(kept, func(a, b *T) int {
		c := by(a, b)
		if q.Desc {
			c = -c
		}
		return cmp.Or(c, strings.Compare(name(a), name(b)))
	})
	total := len(kept)
	page := make([]T, 0, max(min(q.Limit, total-q.Offset), 0))
	for _, r := range kept[min(q.Offset, total):min(q.Offset+q.Limit, total)] {
		page = append(page, *r)
	}
	return page, total
}

// streamSorts are the streams list's sort keys, the default first.
var streamSorts = []string{"name", "shards", "tail", "first", "records", "stored_bytes", "publish_rate", "publish_bytes_rate",
	"delivered_rate", "delivered_bytes_rate", "subscriptions", "groups", "group_lag"}

var streamKeys = map[string]func(a, b *streamRow) int{
	"name":                 func(a, b *streamRow) int { return strings.Compare(a.Name, b.Name) },
	"shards":               func(a, b *streamRow) int { return cmp.Compare(a.Shards, b.Shards) },
	"tail":                 func(a, b *streamRow) int { return cmp.Compare(a.Tail, b.Tail) },
	"first":                func(a, b *streamRow) int { return cmp.Compare(a.First, b.First) },
	"records":              func(a, b *streamRow) int { return cmp.Compare(a.Records, b.Records) },
	"stored_bytes":         func(a, b *streamRow) int { return cmp.Compare(a.StoredBytes, b.StoredBytes) },
	"publish_rate":         func(a, b *streamRow) int { return cmp.Compare(a.PublishRecords, b.PublishRecords) },
	"publish_bytes_rate":   func(a, b *streamRow) int { return cmp.Compare(a.PublishBytes, b.PublishBytes) },
	"delivered_rate":       func(a, b *streamRow) int { return cmp.Compare(a.DeliveredBatches, b.DeliveredBatches) },
	"delivered_bytes_rate": func(a, b *streamRow) int { return cmp.Compare(a.DeliveredBytes, b.DeliveredBytes) },
	"subscriptions":        func(a, b *streamRow) int { return cmp.Compare(a.Subscriptions, b.Subscriptions) },
	"groups":               func(a, b *streamRow) int { return cmp.Compare(a.Groups, b.Groups) },
	"group_lag":            func(a, b *streamRow) int { return cmp.Compare(a.GroupLag, b.GroupLag) },
}

// groupSorts are the groups list's sort keys, the default first.
var groupSorts = []string{"name", "lag", "claims", "members", "redelivered", "dead_letters"}

var groupKeys = map[string]func(a, b *groupRow) int{
	"name":         func(a, b *groupRow) int { return strings.Compare(a.Stream+"\x00"+a.Group, b.Stream+"\x00"+b.Group) },
	"lag":          func(a, b *groupRow) int { return cmp.Compare(a.Lag, b.Lag) },
	"claims":       func(a, b *groupRow) int { return cmp.Compare(a.Claims, b.Claims) },
	"members":      func(a, b *groupRow) int { return cmp.Compare(a.Members, b.Members) },
	"redelivered":  func(a, b *groupRow) int { return cmp.Compare(a.Redelivered, b.Redelivered) },
	"dead_letters": func(a, b *groupRow) int { return cmp.Compare(a.DeadLetters, b.DeadLetters) },
}

// listPage is a list endpoint's answer.
type listPage[T any] struct {
	// Total is how many rows passed the filter; Offset and Limit the page.
	Total  int    `json:"total"`
	Offset int    `json:"offset"`
	Limit  int    `json:"limit"`
	Sort   string `json:"sort"`
	Order  string `json:"order"`
	// At is the sampler's tick the rows are from.
	At   time.Time `json:"at"`
	Rows []T       `json:"rows"`
}

func newListPage[T any](q pageQuery, at time.Time, rows []T, total int) listPage[T] {
	order := "asc"
	if q.Desc {
		order = "desc"
	}
	return listPage[T]{Total: total, Offset: q.Offset, Limit: q.Limit, Sort: q.Sort, Order: order, At: at.UTC(), Rows: rows}
}

// serveStreams answers GET /api/v1/streams: the streams p sees, filtered,
// sorted and paged.
func (d *dashboard) serveStreams(w http.ResponseWriter, r *http.Request, p actors.Principal) {
	q, aerr := parsePage(r, streamSorts, maxPageLimit)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := groupsAllowed(p); aerr != nil && (q.Sort == "groups" || q.Sort == "group_lag") {
		writeError(w, aerr)
		return
	}
	snap := d.snap.Load()
	rows, total := pageOf(snap.streams, q, func(s *streamRow) bool { return p.Sees(s.name) },
		func(s *streamRow) string { return s.Name }, streamKeys)
	for i := range rows {
		hideGroups(p, &rows[i])
	}
	writeJSON(w, http.StatusOK, newListPage(q, snap.at, rows, total))
}

// hideGroups zeroes a stream row's group figures for credentials that may
// not see consumer groups (groupsAllowed).
func hideGroups(p actors.Principal, row *streamRow) {
	if groupsAllowed(p) != nil {
		row.Groups, row.GroupLag = 0, 0
	}
}

// groupsAllowed says whether p may see consumer groups (consume or
// manage, as listing them on the QUIC listener takes).
func groupsAllowed(p actors.Principal) *apiError {
	if p.Any || p.Perms&(actors.PermConsume|actors.PermManage) != 0 {
		return nil
	}
	return &apiError{status: http.StatusForbidden, code: wire.CodePermissionDenied.String(),
		message: fmt.Sprintf("credentials %q do not allow consume or manage: consumer groups are not shown to them", p.Name)}
}

// serveGroups answers GET /api/v1/groups: the consumer groups coordinated
// here on streams p sees, filtered, sorted and paged.
func (d *dashboard) serveGroups(w http.ResponseWriter, r *http.Request, p actors.Principal) {
	if aerr := groupsAllowed(p); aerr != nil {
		writeError(w, aerr)
		return
	}
	q, aerr := parsePage(r, groupSorts, maxPageLimit)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	snap := d.snap.Load()
	rows, total := pageOf(snap.groups, q, func(g *groupRow) bool { return p.Sees(g.name) },
		func(g *groupRow) string { return g.Stream + "/" + g.Group }, groupKeys)
	writeJSON(w, http.StatusOK, newListPage(q, snap.at, rows, total))
}

// nodeView is GET /api/v1/node and each event of /api/v1/events.
type nodeView struct {
	NodeID        string    `json:"node_id"`
	Version       string    `json:"version"`
	Revision      string    `json:"revision,omitempty"`
	GoVersion     string    `json:"go_version"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	At            time.Time `json:"at"`
	// Scope is "node" or "tenant" (whoami); Tenant and Namespaces what a
	// tenant's figures cover.
	Scope      string   `json:"scope"`
	Tenant     string   `json:"tenant,omitempty"`
	Namespaces []string `json:"namespaces,omitempty"`
	// Cluster is set on a node of a cluster.
	Cluster *clusterBrief `json:"cluster,omitempty"`
	// Totals are the scope's; Node the node's own (node scope only).
	Totals scopeFigures `json:"totals"`
	Node   *nodeFigures `json:"node,omitempty"`
	// Sample is the scope's last tick; Series its last five minutes (with
	// ?series=1).
	Sample dashSample  `json:"sample"`
	Series *dashSeries `json:"series,omitempty"`
}

// clusterBrief is a cluster node's place in the node view.
type clusterBrief struct {
	NodeID uint64 `json:"node_id"`
	Nodes  int    `json:"nodes"`
}

// nodeView builds p's view of the node at the last tick.
func (d *dashboard) nodeView(p actors.Principal, series bool) (*nodeView, *apiError) {
	sc := d.scopeOf(p)
	if sc == nil {
		return nil, &apiError{status: http.StatusForbidden, code: wire.CodePermissionDenied.String(), message: "these credentials have no view here"}
	}
	snap := d.snap.Load()
	v := &nodeView{NodeID: d.n.nodeID, Version: d.build.Version, Revision: d.build.Revision, GoVersion: d.build.GoVersion,
		Started: d.started.UTC(), UptimeSeconds: time.Since(d.started).Seconds(), At: snap.at.UTC(), Scope: "tenant",
		Tenant: p.Tenant, Namespaces: p.Namespaces}
	if p.Any {
		v.Scope = "node"
		node := snap.node
		v.Node = &node
	}
	if c := d.n.cluster; c != nil {
		v.Cluster = &clusterBrief{NodeID: c.self, Nodes: len(c.nodes())}
	}
	sc.mu.Lock()
	v.Totals = sc.mu.latest
	v.Sample, _ = sc.mu.ring.last()
	if series {
		v.Series = sc.mu.ring.series(dashInterval.Seconds(), p.Any)
	}
	sc.mu.Unlock()
	// The scope's group figures, to credentials that may see groups only:
	// zero to the others, as in the streams list.
	if groupsAllowed(p) != nil {
		v.Totals.Groups, v.Totals.Members, v.Totals.GroupLag = 0, 0, 0
		v.Sample.GroupLag = 0
		if v.Series != nil {
			clear(v.Series.GroupLag)
		}
	}
	return v, nil
}

// serveNode answers GET /api/v1/node[?series=1].
func (d *dashboard) serveNode(w http.ResponseWriter, r *http.Request, p actors.Principal) {
	series := r.URL.Query().Get("series")
	v, aerr := d.nodeView(p, series == "1" || series == "true")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// serveEvents answers GET /api/v1/events: server-sent events, one "node"
// event (the node view, without series) per tick, until the client leaves
// or the node stops, or its credentials stop being accepted (a login that
// expired, a token no longer in the tokens file). At most
// dashMaxEventStreams are open at once, dashMaxScopeEventStreams of one
// tenant scope; an event the client does not take within
// dashEventWriteTimeout ends its stream.
func (d *dashboard) serveEvents(w http.ResponseWriter, r *http.Request, p actors.Principal) {
	sc := d.scopeOf(p)
	if sc == nil {
		writeError(w, &apiError{status: http.StatusForbidden, code: wire.CodePermissionDenied.String(), message: "these credentials have no view here"})
		return
	}
	if !p.Any {
		if sc.events.Add(1) > dashMaxScopeEventStreams {
			sc.events.Add(-1)
			writeError(w, &apiError{status: http.StatusServiceUnavailable, code: wire.CodeOverloaded.String(),
				message: fmt.Sprintf("%d event streams of tenant %s are open, the most this node serves one tenant; poll /api/v1/node instead", dashMaxScopeEventStreams, p.Tenant)})
			return
		}
		defer sc.events.Add(-1)
	}
	if d.events.Add(1) > dashMaxEventStreams {
		d.events.Add(-1)
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: wire.CodeOverloaded.String(),
			message: fmt.Sprintf("%d event streams are open, the most this node serves; poll /api/v1/node instead", dashMaxEventStreams)})
		return
	}
	defer d.events.Add(-1)
	rc := http.NewResponseController(w)
	// The connection may serve another request after this one.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	snap := d.snap.Load()
	for first := true; ; first = false {
		if !first {
			// The credentials are checked again at every event.
			if q, aerr := d.principal(r); aerr != nil || scopeKey(q) != sc.key {
				return
			}
		}
		v, aerr := d.nodeView(p, false)
		if aerr != nil {
			return
		}
		b, _ := json.Marshal(v)
		_ = rc.SetWriteDeadline(time.Now().Add(dashEventWriteTimeout))
		if _, err := fmt.Fprintf(w, "event: node\ndata: %s\n\n", b); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-snap.next:
			d.used()
			snap = d.snap.Load()
		case <-r.Context().Done():
			return
		case <-d.n.stop:
			return
		}
	}
}
