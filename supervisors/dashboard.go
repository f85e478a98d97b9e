package supervisors

import (
	"crypto/rand"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/wire"
)

// The node's dashboard: a page at / on the HTTP listener and the JSON API
// under /api/v1/ it reads (docs/observability.md). Its figures come from
// three places, chosen so that the node's hot paths pay nothing for it:
//
//   - Every second a sampler goroutine reads the atomics the actors already
//     publish (Stats: node-wide and per-stream counters, group gauges, the
//     shards' published tails), asks the catalog for its stream list (one
//     request), and keeps the result as an immutable snapshot plus five
//     minutes of time series per scope. List views (streams, groups) and
//     the event stream read that snapshot: sorting, filtering and paging
//     1,000 streams is done in the HTTP goroutine, not by any actor.
//   - Detail views ask actors, with a fan-out bounded by the page: a
//     stream's shards (ShardStatsRequest), a page of one shard's
//     subscriptions (SubscriptionStatsRequest, at most a page's worth), a
//     group's coordinator (its describe), a page of replicated shards.
//   - Stored bytes come from the logs' batch indexes, walked by a sizer
//     goroutine that runs only while someone uses the API and sleeps 19
//     times as long as each walk took (at most 5% of one core).
//
// The two goroutines are the node's (n.wg) and end when it stops.

// dashInterval is the sampler's tick; dashHistory how many ticks of series
// are kept (five minutes).
const (
	dashInterval = time.Second
	dashHistory  = 300
	// dashLatencyWindow is how many ticks the headline latency quantiles
	// cover.
	dashLatencyWindow = 10
	// dashActive is how long after the last API request the sizer goes on
	// measuring stored bytes.
	dashActive = 2 * time.Minute
	// dashSizerPause is how long the sizer rests between passes over
	// every stream.
	dashSizerPause = 10 * time.Second
	// dashSizerDuty: the sizer sleeps this many times as long as each
	// shard's walk took.
	dashSizerDuty = 19
	// dashStorageEvery is how many ticks apart the data directory's size is
	// read.
	dashStorageEvery = 10
	// dashMaxEventStreams bounds the open event streams (/api/v1/events);
	// dashMaxScopeEventStreams those of one tenant scope, so that one
	// tenant cannot take every stream from the others.
	dashMaxEventStreams      = 64
	dashMaxScopeEventStreams = 16
	// dashEventWriteTimeout bounds one event's write: a client that stops
	// reading loses its stream (and its place) rather than holding them.
	dashEventWriteTimeout = 10 * time.Second
)

// dashboard is a node's dashboard state. Its goroutines (sampler and
// sizer) are started by start and end on the node's stop channel.
type dashboard struct {
	n       *Node
	started time.Time
	build   BuildInfo
	// sessionKey signs login cookies; it is made at start, so a restart
	// ends every login.
	sessionKey [32]byte
	// commit and ack are the commit and publish-ack latency histograms,
	// fed beside the metrics' (teeRecorder).
	commit, ack latencyHist
	// scopes are what principals may see, by scopeKey; fixed at start.
	scopes map[string]*dashScope
	// snap is the last tick's snapshot (never nil after newDashboard).
	snap atomic.Pointer[dashSnapshot]
	// lastUse is when the API was last used (Unix nanoseconds): the sizer
	// runs only while it is recent.
	lastUse atomic.Int64
	// events counts the open event streams.
	events atomic.Int64
	// sizes are the streams' stored bytes, by stream id, as the sizer last
	// measured them.
	sizes struct {
		sync.Mutex
		m map[uint64]storedSize
	}
	// ticks, if set, replaces the sampler's ticker (Options.DashboardTicks).
	ticks <-chan time.Time
	// skew is added to time.Now for logins' expiry (nanoseconds; tests
	// move it forward).
	skew atomic.Int64
	// state is the sampler's own, touched only by its goroutine.
	state samplerState
}

// storedSize is one stream's stored records bytes, and when it was
// measured.
type storedSize struct {
	bytes int64
	at    time.Time
}

// samplerState is what the sampler carries from one tick to the next.
type samplerState struct {
	last time.Time
	// prev are the counters read at the last tick, by stream name, and
	// node the node-wide ones.
	prev map[string]streamCounts
	node nodeCounts
	// commits and acks are the histograms' counts at each of the last
	// dashLatencyWindow ticks, oldest first.
	commits, acks []histCounts
	// ticks counts ticks; storage is the data directory's size at the last
	// read.
	ticks   int
	storage int64
	// handles is the catalog's stream list at the last tick.
	handles []*actors.StreamHandle
}

// streamCounts are one stream's counters at a tick.
type streamCounts struct {
	records, bytes, delivered, deliveredBytes uint64
}

// nodeCounts are the node-wide counters at a tick.
type nodeCounts struct {
	records, bytes, delivered, deliveredBytes, groupDelivered, groupAcked, commits uint64
}

// dashSnapshot is what the sampler saw at one tick. It is immutable once
// stored; next is closed when the following snapshot replaces it.
type dashSnapshot struct {
	at      time.Time
	streams []streamRow // by name
	// handles are the catalog's streams, by id.
	handles map[uint64]*actors.StreamHandle
	groups  []groupRow // by stream, then group
	node    nodeFigures
	next    chan struct{}
}

// streamRow is one stream in the streams list (GET /api/v1/streams).
type streamRow struct {
	Name     string `json:"name"`
	ID       uint64 `json:"id"`
	Shards   int    `json:"shards"`
	Durable  bool   `json:"durable"`
	Replicas int    `json:"replicas"`
	Overflow string `json:"overflow"`
	// Tail sums the shards' committed tails, First their first retained
	// offsets (the retention floor); Records is what they retain.
	Tail    uint64 `json:"tail"`
	First   uint64 `json:"first"`
	Records uint64 `json:"records"`
	// StoredBytes is the records bytes stored (-1: not measured yet),
	// StoredAgeSeconds how old that figure is.
	StoredBytes      int64   `json:"stored_bytes"`
	StoredAgeSeconds float64 `json:"stored_age_seconds,omitempty"`
	// Rates over the last tick.
	PublishRecords   float64 `json:"publish_records_per_second"`
	PublishBytes     float64 `json:"publish_bytes_per_second"`
	DeliveredBatches float64 `json:"delivered_batches_per_second"`
	DeliveredBytes   float64 `json:"delivered_bytes_per_second"`
	// PublishedRecords and PublishedBytes count committed publishes since
	// the node started.
	PublishedRecords uint64 `json:"published_records"`
	PublishedBytes   uint64 `json:"published_bytes"`
	Subscriptions    int64  `json:"subscriptions"`
	Groups           int    `json:"groups"`
	GroupLag         int64  `json:"group_lag"`
	name             wire.StreamName
}

// groupRow is one consumer group in the groups list (GET /api/v1/groups).
type groupRow struct {
	Stream string `json:"stream"`
	Group  string `json:"group"`
	// Lag is the records between the committed cursors and the tails,
	// summed; ShardLag the same shard by shard.
	Lag      int64   `json:"lag"`
	ShardLag []int64 `json:"shard_lag"`
	Claims   int64   `json:"claims"`
	Members  int64   `json:"members"`
	// Redelivered and DeadLettered count, since its coordinator here
	// started, claims whose visibility lapsed and records dead-lettered;
	// DeadLetters are the dead letters it holds now.
	Redelivered  uint64 `json:"redelivered"`
	DeadLettered uint64 `json:"dead_lettered"`
	DeadLetters  int64  `json:"dead_letters"`
	name         wire.StreamName
}

// nodeFigures are the node's own figures at a tick (node scope only).
type nodeFigures struct {
	Connections   int64 `json:"connections"`
	Subscriptions int64 `json:"subscriptions"`
	GroupMembers  int64 `json:"group_members"`
	Goroutines    int64 `json:"goroutines"`
	HeapBytes     int64 `json:"heap_bytes"`
	RSSBytes      int64 `json:"rss_bytes"`
	// GoTotalBytes is all the memory the Go runtime mapped.
	GoTotalBytes int64 `json:"go_total_bytes"`
	// StorageBytes is the data directory's size on disk.
	StorageBytes int64 `json:"storage_bytes"`
	// Commit and publish-ack latency over the last dashLatencyWindow
	// ticks, in seconds, and the storage commits per second.
	CommitP50        float64 `json:"commit_p50_seconds"`
	CommitP99        float64 `json:"commit_p99_seconds"`
	CommitsPerSecond float64 `json:"commits_per_second"`
	AckP50           float64 `json:"publish_ack_p50_seconds"`
	AckP99           float64 `json:"publish_ack_p99_seconds"`
	// Totals since the node started.
	PublishedRecords uint64 `json:"published_records"`
	PublishedBytes   uint64 `json:"published_bytes"`
	DeliveredBatches uint64 `json:"delivered_batches"`
	DeliveredBytes   uint64 `json:"delivered_bytes"`
	GroupDelivered   uint64 `json:"group_delivered"`
	GroupAcked       uint64 `json:"group_acked"`
	Drops            uint64 `json:"subscriber_drops"`
	// RaftLeading is how many replicated shards this node leads.
	RaftLeading int64 `json:"raft_leading,omitempty"`
	// Sample is the last tick's sample (the node scope's series).
	Sample dashSample `json:"-"`
}

// newDashboard makes n's dashboard and points the node's latency
// recorders through it. Call before the actors start; start runs it.
func newDashboard(n *Node, ticks <-chan time.Time) *dashboard {
	d := &dashboard{n: n, started: time.Now(), build: ReadBuildInfo(), scopes: map[string]*dashScope{}, ticks: ticks}
	_, _ = rand.Read(d.sessionKey[:])
	d.sizes.m = map[uint64]storedSize{}
	d.state.prev = map[string]streamCounts{}
	n.stats.Hist.CommitSeconds = teeRecorder{n.stats.Hist.CommitSeconds, &d.commit}
	n.stats.Hist.PublishAckSeconds = teeRecorder{n.stats.Hist.PublishAckSeconds, &d.ack}
	principals := []actors.Principal{actors.DevPrincipal}
	if !n.auth.Dev() {
		principals = n.auth.Principals()
	}
	for _, p := range principals {
		k := scopeKey(p)
		if d.scopes[k] == nil {
			s := &dashScope{key: k, p: p}
			s.mu.ring = newSampleRing(dashHistory)
			d.scopes[k] = s
		}
	}
	d.snap.Store(&dashSnapshot{at: time.Now(), next: make(chan struct{})})
	return d
}

// start runs the sampler and the sizer until the node stops.
func (d *dashboard) start() {
	d.tick(time.Now())
	d.n.wg.Add(2)
	go func() {
		defer d.n.wg.Done()
		ticks := d.ticks
		if ticks == nil {
			t := time.NewTicker(dashInterval)
			defer t.Stop()
			ticks = t.C
		}
		for {
			select {
			case <-d.n.stop:
				return
			case now := <-ticks:
				d.tick(now)
			}
		}
	}()
	go func() {
		defer d.n.wg.Done()
		d.sizeLoop()
	}()
}

// clock is the time logins are sealed and expire by.
func (d *dashboard) clock() time.Time { return time.Now().Add(time.Duration(d.skew.Load())) }

// used notes an API request: the sizer keeps measuring while requests
// come.
func (d *dashboard) used() { d.lastUse.Store(time.Now().UnixNano()) }

// scopeOf returns the scope of p (nil if p is of none: a certificate's
// principal, which never reaches the HTTP listener).
func (d *dashboard) scopeOf(p actors.Principal) *dashScope {
	return d.scopes[scopeKey(p)]
}

// tick samples everything once, at now.
func (d *dashboard) tick(now time.Time) {
	st := &d.state
	stats := d.n.stats
	dt := 0.0
	if !st.last.IsZero() {
		dt = now.Sub(st.last).Seconds()
	}
	st.last = now
	st.ticks++
	rate := func(cur, prev uint64) float64 {
		if dt <= 0 || cur < prev {
			return 0
		}
		return float64(cur-prev) / dt
	}

	// The stream list: kept from the last tick if the catalog is slow.
	if res, err := d.n.sys.Root.RequestFuture(d.n.children.Catalog, &actors.AllStreamsRequest{}, time.Second).Result(); err == nil {
		st.handles = res.(*actors.AllStreamsResponse).Streams
	}
	counters := make(map[string]*actors.StreamCounters, len(st.handles))
	stats.EachStream(func(name string, c *actors.StreamCounters) { counters[name] = c })
	groups := []groupRow{}
	groupsOf := map[string][]int{}
	stats.EachGroup(func(g *actors.GroupGauges) {
		name, err := wire.ParseStreamName(g.Stream)
		if err != nil {
			return
		}
		row := groupRow{Stream: g.Stream, Group: g.Group, Claims: g.Claims.Load(), Members: g.Members.Load(),
			Redelivered: g.Redelivered.Load(), DeadLettered: g.DeadLettered.Load(), DeadLetters: g.Dead.Load(), name: name}
		for _, l := range g.ShardLags() {
			row.ShardLag = append(row.ShardLag, int64(l.Lag()))
			row.Lag += int64(l.Lag())
		}
		groups = append(groups, row)
	})
	slices.SortFunc(groups, func(a, b groupRow) int {
		return strings.Compare(a.Stream+"\x00"+a.Group, b.Stream+"\x00"+b.Group)
	})
	for i, g := range groups {
		groupsOf[g.Stream] = append(groupsOf[g.Stream], i)
	}
	d.sizes.Lock()
	sizes := maps.Clone(d.sizes.m)
	d.sizes.Unlock()
	streams := make([]streamRow, 0, len(st.handles))
	handles := make(map[uint64]*actors.StreamHandle, len(st.handles))
	prev := make(map[string]streamCounts, len(st.handles))
	for _, h := range st.handles {
		if h.Deleted() {
			continue
		}
		handles[h.ID] = h
		name := h.Name.String()
		row := streamRow{Name: name, ID: h.ID, Shards: len(h.Shards), Durable: h.Config.Durable,
			Replicas: max(int(h.Config.Replicas), 1), Overflow: h.Config.Overflow.String(), StoredBytes: -1, name: h.Name}
		for _, p := range h.Progress {
			if p != nil {
				row.Tail += p.Tail.Load()
				row.First += p.First.Load()
			}
		}
		row.Records = row.Tail - min(row.First, row.Tail)
		if s, ok := sizes[h.ID]; ok {
			row.StoredBytes, row.StoredAgeSeconds = s.bytes, now.Sub(s.at).Seconds()
		}
		if c := counters[name]; c != nil {
			cur := streamCounts{records: c.Records.Load(), bytes: c.Bytes.Load(), delivered: c.DeliveredBatches.Load(), deliveredBytes: c.DeliveredBytes.Load()}
			if p, ok := st.prev[name]; ok {
				row.PublishRecords, row.PublishBytes = rate(cur.records, p.records), rate(cur.bytes, p.bytes)
				row.DeliveredBatches, row.DeliveredBytes = rate(cur.delivered, p.delivered), rate(cur.deliveredBytes, p.deliveredBytes)
			}
			prev[name] = cur
			row.PublishedRecords, row.PublishedBytes = cur.records, cur.bytes
			row.Subscriptions = max(c.Subscriptions.Load(), 0)
		}
		for _, i := range groupsOf[name] {
			row.Groups++
			row.GroupLag += groups[i].Lag
		}
		streams = append(streams, row)
	}
	st.prev = prev
	slices.SortFunc(streams, func(a, b streamRow) int { return strings.Compare(a.Name, b.Name) })

	// The node's own figures.
	nc := nodeCounts{records: stats.PublishedRecords.Load(), bytes: stats.PublishedBytes.Load(), delivered: stats.DeliveredBatches.Load(),
		deliveredBytes: stats.DeliveredBytes.Load(), groupDelivered: stats.GroupDelivered.Load(), groupAcked: stats.GroupAcked.Load(),
		commits: stats.Commits.Load()}
	commits, acks := d.commit.snapshot(), d.ack.snapshot()
	var tickCommits, tickAcks histCounts
	if len(st.commits) > 0 {
		tickCommits, tickAcks = commits.since(&st.commits[len(st.commits)-1]), acks.since(&st.acks[len(st.acks)-1])
	}
	st.commits, st.acks = append(st.commits, commits), append(st.acks, acks)
	if len(st.commits) > dashLatencyWindow+1 {
		st.commits, st.acks = st.commits[1:], st.acks[1:]
	}
	windowCommits, windowAcks := commits.since(&st.commits[0]), acks.since(&st.acks[0])
	if st.ticks%dashStorageEvery == 1 {
		st.storage = dirSize(d.n.cfg.DataDir)
	}
	mem := readMemory()
	node := nodeFigures{Connections: stats.Connections.Load(), Subscriptions: stats.Subscriptions.Load(), GroupMembers: stats.GroupMembers.Load(),
		Goroutines: mem.goroutines, HeapBytes: mem.heap, RSSBytes: mem.rss, GoTotalBytes: mem.total, StorageBytes: st.storage,
		CommitP50: windowCommits.quantile(0.5), CommitP99: windowCommits.quantile(0.99), AckP50: windowAcks.quantile(0.5), AckP99: windowAcks.quantile(0.99),
		PublishedRecords: nc.records, PublishedBytes: nc.bytes, DeliveredBatches: nc.delivered, DeliveredBytes: nc.deliveredBytes,
		GroupDelivered: nc.groupDelivered, GroupAcked: nc.groupAcked, RaftLeading: stats.RaftLeading.Load(),
		Drops: stats.DropCountBound.Load() + stats.DropByteBound.Load() + stats.DropTotalBound.Load() + stats.DropEvicted.Load()}
	if len(st.commits) > 1 {
		node.CommitsPerSecond = float64(windowCommits.total()) / (float64(len(st.commits)-1) * dashInterval.Seconds())
	}
	ms := now.UnixMilli()
	node.Sample = dashSample{T: ms, PublishRecords: rate(nc.records, st.node.records), PublishBytes: rate(nc.bytes, st.node.bytes),
		DeliveredBatches: rate(nc.delivered, st.node.delivered), DeliveredBytes: rate(nc.deliveredBytes, st.node.deliveredBytes),
		GroupDelivered: rate(nc.groupDelivered, st.node.groupDelivered), GroupAcked: rate(nc.groupAcked, st.node.groupAcked),
		CommitP50: tickCommits.quantile(0.5), CommitP99: tickCommits.quantile(0.99), AckP99: tickAcks.quantile(0.99),
		HeapBytes: mem.heap, RSSBytes: mem.rss, Connections: node.Connections, Subscriptions: node.Subscriptions}
	st.node = nc
	for _, g := range groups {
		node.Sample.GroupLag += g.Lag
	}

	// Each scope's figures and sample.
	for _, sc := range d.scopes {
		var f scopeFigures
		s := dashSample{T: ms}
		if sc.p.Any {
			s = node.Sample
		}
		for i := range streams {
			r := &streams[i]
			if !sc.p.Sees(r.name) {
				continue
			}
			f.Streams++
			f.Shards += r.Shards
			f.Subscriptions += r.Subscriptions
			f.PublishedRecords += r.PublishedRecords
			f.PublishedBytes += r.PublishedBytes
			f.StoredBytes += max(r.StoredBytes, 0)
			if !sc.p.Any {
				s.PublishRecords += r.PublishRecords
				s.PublishBytes += r.PublishBytes
				s.DeliveredBatches += r.DeliveredBatches
				s.DeliveredBytes += r.DeliveredBytes
			}
			if c := counters[r.Name]; c != nil {
				f.DeliveredBatches += c.DeliveredBatches.Load()
				f.DeliveredBytes += c.DeliveredBytes.Load()
			}
		}
		for i := range groups {
			if sc.p.Sees(groups[i].name) {
				f.Groups++
				f.Members += groups[i].Members
				f.GroupLag += groups[i].Lag
			}
		}
		if !sc.p.Any {
			s.Subscriptions, s.GroupLag = f.Subscriptions, f.GroupLag
		}
		sc.mu.Lock()
		sc.mu.ring.push(s)
		sc.mu.latest = f
		sc.mu.Unlock()
	}

	snap := &dashSnapshot{at: now, streams: streams, handles: handles, groups: groups, node: node, next: make(chan struct{})}
	old := d.snap.Swap(snap)
	close(old.next)
}

// memFigures are the process's memory and goroutines.
type memFigures struct {
	heap, total, rss, goroutines int64
}

// memSamples are the runtime metrics readMemory reads (runtime/metrics
// reads them without stopping the world, unlike runtime.ReadMemStats).
var memSamples = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/total:bytes", "/sched/goroutines:goroutines"}

// readMemory reads the process's memory figures.
func readMemory() memFigures {
	s := make([]metrics.Sample, len(memSamples))
	for i, name := range memSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	var m memFigures
	val := func(i int) int64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return int64(s[i].Value.Uint64())
		}
		return 0
	}
	m.heap, m.total, m.goroutines = val(0), val(1), val(2)
	m.rss = readRSS()
	return m
}

// readRSS returns the process's resident set size from /proc/self/statm
// (0 where there is none).
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// dirSize sums the sizes of the files under dir (what the data directory
// takes on disk, give or take sparse files).
func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed meanwhile (a compaction)
		}
		if e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// sizeLoop measures the streams' stored bytes from their logs' batch
// indexes while the API is in use: one shard at a time, resting
// dashSizerDuty times as long as each walk took, and dashSizerPause
// between passes.
func (d *dashboard) sizeLoop() {
	wait := func(dur time.Duration) bool {
		t := time.NewTimer(dur)
		defer t.Stop()
		select {
		case <-d.n.stop:
			return false
		case <-t.C:
			return true
		}
	}
	for {
		if time.Since(time.Unix(0, d.lastUse.Load())) > dashActive {
			if !wait(dashInterval) {
				return
			}
			continue
		}
		if !d.sizePass(wait) || !wait(dashSizerPause) {
			return
		}
	}
}

// sizePass measures every stream once; false when the node stopped.
func (d *dashboard) sizePass(wait func(time.Duration) bool) bool {
	res, err := d.n.sys.Root.RequestFuture(d.n.children.Catalog, &actors.AllStreamsRequest{}, time.Second).Result()
	if err != nil {
		return wait(dashInterval)
	}
	seen := map[uint64]bool{}
	for _, h := range res.(*actors.AllStreamsResponse).Streams {
		seen[h.ID] = true
		var total int64
		ok := true
		for i := range h.Shards {
			start := time.Now()
			st, err := h.Log.Stats(h.ShardKey(uint32(i)))
			took := time.Since(start)
			if err != nil {
				ok = false
			}
			total += st.Bytes
			if !wait(max(took*dashSizerDuty, time.Millisecond)) {
				return false
			}
		}
		if ok && !h.Deleted() {
			d.sizes.Lock()
			d.sizes.m[h.ID] = storedSize{bytes: total, at: time.Now()}
			d.sizes.Unlock()
		}
	}
	d.sizes.Lock()
	for id := range d.sizes.m {
		if !seen[id] {
			delete(d.sizes.m, id)
		}
	}
	d.sizes.Unlock()
	return true
}
