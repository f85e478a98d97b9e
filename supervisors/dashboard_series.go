package supervisors

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/heraldmq/herald/actors"
)

// dashSample is one tick of the dashboard's time series: rates over the
// tick and gauges at its end. Figures marked "node" are zero in a tenant's
// scope (they are the node's, shared by every tenant).
type dashSample struct {
	// T is the tick's end, in Unix milliseconds.
	T int64 `json:"t"`
	// PublishRecords and PublishBytes are committed publishes per second;
	// DeliveredBatches and DeliveredBytes what subscriptions' lanes wrote
	// per second.
	PublishRecords   float64 `json:"publish_records_per_second"`
	PublishBytes     float64 `json:"publish_bytes_per_second"`
	DeliveredBatches float64 `json:"delivered_batches_per_second"`
	DeliveredBytes   float64 `json:"delivered_bytes_per_second"`
	// GroupDelivered and GroupAcked are consumer-group records handed out
	// and acked per second (node).
	GroupDelivered float64 `json:"group_delivered_per_second"`
	GroupAcked     float64 `json:"group_acked_per_second"`
	// CommitP50 and CommitP99 are storage commit durations over the tick,
	// AckP99 publish answers', in seconds (node; 0: none in the tick).
	CommitP50 float64 `json:"commit_p50_seconds"`
	CommitP99 float64 `json:"commit_p99_seconds"`
	AckP99    float64 `json:"publish_ack_p99_seconds"`
	// HeapBytes and RSSBytes are the process's (node).
	HeapBytes int64 `json:"heap_bytes"`
	RSSBytes  int64 `json:"rss_bytes"`
	// Connections are the node's client connections (node); Subscriptions
	// the live subscriptions in scope; GroupLag the groups' lag summed.
	Connections   int64 `json:"connections"`
	Subscriptions int64 `json:"subscriptions"`
	GroupLag      int64 `json:"group_lag"`
}

// dashSeries is the last samples of one scope, oldest first, in columns
// (the API's series object).
type dashSeries struct {
	IntervalSeconds  float64   `json:"interval_seconds"`
	T                []int64   `json:"t"`
	PublishRecords   []float64 `json:"publish_records_per_second"`
	PublishBytes     []float64 `json:"publish_bytes_per_second"`
	DeliveredBatches []float64 `json:"delivered_batches_per_second"`
	DeliveredBytes   []float64 `json:"delivered_bytes_per_second"`
	GroupDelivered   []float64 `json:"group_delivered_per_second,omitempty"`
	GroupAcked       []float64 `json:"group_acked_per_second,omitempty"`
	CommitP99        []float64 `json:"commit_p99_seconds,omitempty"`
	AckP99           []float64 `json:"publish_ack_p99_seconds,omitempty"`
	HeapBytes        []int64   `json:"heap_bytes,omitempty"`
	Connections      []int64   `json:"connections,omitempty"`
	Subscriptions    []int64   `json:"subscriptions"`
	GroupLag         []int64   `json:"group_lag"`
}

// sampleRing keeps the last cap samples.
type sampleRing struct {
	buf   []dashSample
	start int // index of the oldest when full
}

func newSampleRing(n int) *sampleRing { return &sampleRing{buf: make([]dashSample, 0, n)} }

// push adds s, dropping the oldest when full.
func (r *sampleRing) push(s dashSample) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.start] = s
	r.start = (r.start + 1) % len(r.buf)
}

// last returns the newest sample.
func (r *sampleRing) last() (dashSample, bool) {
	if len(r.buf) == 0 {
		return dashSample{}, false
	}
	return r.buf[(r.start+len(r.buf)-1)%len(r.buf)], true
}

// each calls fn for every sample, oldest first.
func (r *sampleRing) each(fn func(s *dashSample)) {
	for i := range r.buf {
		fn(&r.buf[(r.start+i)%len(r.buf)])
	}
}

// series returns the ring as columns; node adds the node's own figures.
func (r *sampleRing) series(interval float64, node bool) *dashSeries {
	n := len(r.buf)
	out := &dashSeries{IntervalSeconds: interval, T: make([]int64, 0, n), PublishRecords: make([]float64, 0, n),
		PublishBytes: make([]float64, 0, n), DeliveredBatches: make([]float64, 0, n), DeliveredBytes: make([]float64, 0, n),
		Subscriptions: make([]int64, 0, n), GroupLag: make([]int64, 0, n)}
	if node {
		out.GroupDelivered, out.GroupAcked = make([]float64, 0, n), make([]float64, 0, n)
		out.CommitP99, out.AckP99 = make([]float64, 0, n), make([]float64, 0, n)
		out.HeapBytes, out.Connections = make([]int64, 0, n), make([]int64, 0, n)
	}
	r.each(func(s *dashSample) {
		out.T = append(out.T, s.T)
		out.PublishRecords = append(out.PublishRecords, s.PublishRecords)
		out.PublishBytes = append(out.PublishBytes, s.PublishBytes)
		out.DeliveredBatches = append(out.DeliveredBatches, s.DeliveredBatches)
		out.DeliveredBytes = append(out.DeliveredBytes, s.DeliveredBytes)
		out.Subscriptions = append(out.Subscriptions, s.Subscriptions)
		out.GroupLag = append(out.GroupLag, s.GroupLag)
		if node {
			out.GroupDelivered = append(out.GroupDelivered, s.GroupDelivered)
			out.GroupAcked = append(out.GroupAcked, s.GroupAcked)
			out.CommitP99 = append(out.CommitP99, s.CommitP99)
			out.AckP99 = append(out.AckP99, s.AckP99)
			out.HeapBytes = append(out.HeapBytes, s.HeapBytes)
			out.Connections = append(out.Connections, s.Connections)
		}
	})
	return out
}

// dashScope is what one kind of principal may see: the whole node (dev
// mode), or a tenant, optionally limited to namespaces. The dashboard keeps
// one series per scope, built at each tick from the streams the scope sees,
// so a tenant's charts hold only its own traffic. Scopes are known at
// start: one per distinct (tenant, namespaces) of the tokens file.
type dashScope struct {
	// key names the scope (scopeKey).
	key string
	// p is a principal of the scope: p.Sees decides what it sees.
	p actors.Principal
	// events counts the scope's open event streams.
	events atomic.Int64
	// mu guards ring and latest: the sampler writes them each tick, the
	// API's handlers read them.
	mu struct {
		sync.Mutex
		ring   *sampleRing
		latest scopeFigures
	}
}

// scopeFigures are a scope's totals at the last tick.
type scopeFigures struct {
	Streams       int   `json:"streams"`
	Shards        int   `json:"shards"`
	Subscriptions int64 `json:"subscriptions"`
	Groups        int   `json:"groups"`
	Members       int64 `json:"group_members"`
	GroupLag      int64 `json:"group_lag"`
	// PublishedRecords and PublishedBytes count committed publishes since
	// the node started; DeliveredBatches and DeliveredBytes what the
	// subscriptions' lanes wrote.
	PublishedRecords uint64 `json:"published_records"`
	PublishedBytes   uint64 `json:"published_bytes"`
	DeliveredBatches uint64 `json:"delivered_batches"`
	DeliveredBytes   uint64 `json:"delivered_bytes"`
	// StoredBytes is the streams' stored records bytes, as last measured.
	StoredBytes int64 `json:"stored_bytes"`
}

// scopeKey names the scope of p: "*" for a principal of every tenant, else
// the tenant and its sorted namespaces.
func scopeKey(p actors.Principal) string {
	if p.Any {
		return "*"
	}
	ns := slices.Clone(p.Namespaces)
	slices.Sort(ns)
	return p.Tenant + "|" + strings.Join(slices.Compact(ns), ",")
}
