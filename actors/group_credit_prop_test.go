package actors

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// A model-based test of memberCredit, the push member's credit window,
// driven against a real groupCore and the coordinator's cursor checks:
// random publishes, claim requests, pushes (redeliveries after a lapsed
// visibility timeout included, which push the same cursor again), acks
// (right, oversized, undersized, forged, stale, repeated, empty),
// heartbeats, commit answers that are durable, failed or never come, and
// members joining and leaving (rebalances). A plain model keeps every
// delivery the client got. After every step, for every member:
//
//   - memberCredit's own invariant holds, and in flight never exceeds the
//     window;
//   - in flight is exactly the records of the deliveries of the current
//     membership whose commit was not answered durable;
//   - credit came back only with durable commits, exactly their counts;
//   - with no claim request out, the budget is min(max, window − in flight).

type creditDelivery struct {
	cursor     []byte
	count      uint32
	epoch      uint64
	credited   bool
	committing uint64 // the commit's seq while one is out
}

type creditMember struct {
	id       string
	credit   *memberCredit
	epoch    uint64
	window   uint32
	maxPush  uint32
	returned uint64 // credit returned, as memberCredit said
	want     uint64 // credit the durable commits should have returned
	// deliveries are every push the client got, of every membership.
	deliveries []*creditDelivery
}

type creditCommit struct {
	m      *creditMember
	d      *creditDelivery
	ranges []stagedRange
}

type creditRun struct {
	t       *testing.T
	rng     *rand.Rand
	core    *groupCore
	coord   *groupCoordinator
	now     time.Time
	members []*creditMember
	// commits are the commits sent and not answered, by seq per member.
	commits map[*creditMember]map[uint64]creditCommit
	step    int
	trace   []string
	counts  map[string]int
}

func (r *creditRun) fatalf(format string, args ...any) {
	r.t.Helper()
	start := max(0, len(r.trace)-30)
	r.t.Fatalf("step %d: %s\nlast ops:\n  %s", r.step, fmt.Sprintf(format, args...), joinLines(r.trace[start:]))
}

func (r *creditRun) note(format string, args ...any) {
	r.trace = append(r.trace, fmt.Sprintf("%d: ", r.step)+fmt.Sprintf(format, args...))
}

// inFlight is the model's in flight: records pushed in the current
// membership whose commit has not been answered durable.
func (m *creditMember) inFlight() uint32 {
	var n uint32
	for _, d := range m.deliveries {
		if d.epoch == m.epoch && !d.credited {
			n += d.count
		}
	}
	return n
}

func (r *creditRun) join(m *creditMember) {
	mem := r.core.join(m.id, m.window, r.now)
	// A join again ends the old membership: its commits are never
	// answered to the new one.
	m.credit, m.epoch = newMemberCredit(m.window, m.maxPush), mem.epoch
	r.commits[m] = map[uint64]creditCommit{}
	r.note("join %s epoch=%d window=%d max=%d shards=%v", m.id, m.epoch, m.window, m.maxPush, mem.shards)
}

func (r *creditRun) leave(m *creditMember) {
	if m.credit == nil {
		return
	}
	r.core.leave(m.id, m.epoch, r.now)
	m.credit = nil
	delete(r.commits, m)
	r.note("leave %s", m.id)
}

func (r *creditRun) ask(m *creditMember) {
	want := uint32(0)
	if m.credit.asked == 0 {
		if in := m.inFlight(); in < m.window {
			want = min(m.credit.maxPerPush, m.window-in)
		}
	}
	got := m.credit.ask()
	r.note("ask %s -> %d", m.id, got)
	if got != want {
		r.fatalf("%s asked for %d, want %d (in flight %d)", m.id, got, want, m.inFlight())
	}
}

// grant plays the coordinator serving a member's claim request.
func (r *creditRun) grant(m *creditMember) {
	asked := m.credit.asked
	if asked == 0 {
		// A push nobody asked for is refused and changes nothing.
		before := *m.credit
		if err := m.credit.granted([]byte("x"), 1); err == nil || m.credit.inFlight != before.inFlight {
			r.fatalf("an unasked push was taken (err %v)", err)
		}
		r.counts["unasked push"]++
		return
	}
	mem := r.core.members[m.id]
	picks := r.core.candidates(slices.Clone(mem.shards), int(asked))
	taken := r.core.takeRead(m.id, picks, nil, r.now)
	var recs []wire.GroupRecord
	for k, p := range picks {
		if taken[k] {
			recs = append(recs, wire.GroupRecord{Shard: p.shard, Offset: p.offset})
		}
	}
	if len(recs) == 0 {
		return // the request stays out until work arrives
	}
	cursor := mintCursor(r.coord.cfg.Secret, cursorToken{stream: r.coord.cfg.Stream.ID, group: cursorGroup(r.coord.cfg.Group, r.coord.core.incarnation),
		epoch: m.epoch, ranges: cursorRanges(recs)})
	if r.rng.IntN(10) == 0 {
		// A push larger than asked breaks the window: refused, no change.
		if err := m.credit.granted(cursor, asked+1+uint32(r.rng.IntN(3))); err == nil || m.credit.asked != asked {
			r.fatalf("an oversized push was taken (err %v)", err)
		}
		r.counts["oversized push"]++
	}
	if err := m.credit.granted(cursor, uint32(len(recs))); err != nil {
		r.fatalf("push of %d records, asked %d: %v", len(recs), asked, err)
	}
	for _, d := range m.deliveries {
		if d.epoch == m.epoch && !d.credited && bytes.Equal(d.cursor, cursor) {
			r.counts["same cursor pushed again"]++
			break
		}
	}
	m.deliveries = append(m.deliveries, &creditDelivery{cursor: cursor, count: uint32(len(recs)), epoch: m.epoch})
	r.note("push %s %d records (asked %d) %v", m.id, len(recs), asked, cursorRanges(recs))
}

// ack plays the client acking, rightly or not, and the member deciding.
func (r *creditRun) ack(m *creditMember) {
	var cursor []byte
	var count uint32
	var d *creditDelivery
	kind := "right"
	switch op := r.rng.IntN(100); {
	case op < 8:
		kind = "heartbeat"
	case op < 12:
		kind, count = "no cursor", uint32(1+r.rng.IntN(5))
	case op < 20:
		kind, cursor, count = "forged", make([]byte, 43+16), uint32(1+r.rng.IntN(5))
		for i := range cursor {
			cursor[i] = byte(r.rng.IntN(256))
		}
		cursor[0] = cursorVersion
	default:
		if len(m.deliveries) == 0 {
			return
		}
		d = m.deliveries[r.rng.IntN(len(m.deliveries))]
		cursor, count = d.cursor, d.count
		switch op := r.rng.IntN(10); {
		case op == 0:
			kind, count = "oversized", d.count+uint32(1+r.rng.IntN(30))
		case op == 1 && d.count > 1:
			kind, count = "undersized", uint32(r.rng.IntN(int(d.count)))
		case op == 2:
			kind = "tampered"
			cursor = slices.Clone(cursor)
			cursor[len(cursor)-1] ^= 1
		}
	}
	// What the member must decide, from the model.
	var want ackKind
	var held []*creditDelivery
	for _, x := range m.deliveries {
		if x.epoch == m.epoch && !x.credited && bytes.Equal(x.cursor, cursor) {
			held = append(held, x)
		}
	}
	var free *creditDelivery
	for _, x := range held {
		if x.committing == 0 {
			free = x
			break
		}
	}
	switch {
	case len(cursor) == 0 && count > 0:
		want = ackRefused
	case len(cursor) == 0:
		want = ackHeartbeat
	case len(held) == 0:
		want = ackVerify
	case count != held[0].count || free == nil:
		want = ackRefused
	default:
		want = ackCommit
	}
	before := m.credit.inFlight
	dec := m.credit.ack(cursor, count)
	r.note("ack %s %s count=%d -> %d %v", m.id, kind, count, dec.kind, dec.err)
	r.counts["ack "+kind]++
	if dec.kind != want {
		r.fatalf("ack %s: member decided %d, want %d", kind, dec.kind, want)
	}
	if m.credit.inFlight != before {
		r.fatalf("an ack changed in flight before its commit was answered: %d -> %d", before, m.credit.inFlight)
	}
	switch dec.kind {
	case ackRefused:
		if dec.err == nil || dec.err.Code != wire.CodeInvalidRequest {
			r.fatalf("refused ack %s with %v, want invalid_request", kind, dec.err)
		}
	case ackCommit:
		// The coordinator stages the commit of a held cursor with its own
		// count; the records are settled once the commit is durable.
		ranges, werr := r.coord.stageCursor(m.epoch, cursor, count)
		if werr != nil {
			r.fatalf("commit of a held delivery: %v", werr)
		}
		free.committing = dec.seq
		r.commits[m][dec.seq] = creditCommit{m: m, d: free, ranges: ranges}
	case ackVerify:
		werr := r.coord.verifyCursor(m.epoch, cursor, count)
		wantCode := wire.CodeInvalidRequest // acked already, or the count disagrees
		switch {
		case kind == "forged" || kind == "tampered":
			wantCode = wire.CodeInvalidCursor
		case d != nil && d.epoch != m.epoch:
			wantCode = wire.CodeStaleCursor
		}
		if werr == nil || werr.Code != wantCode {
			r.fatalf("verify of a %s cursor (delivery epoch %v, now %d): %v, want %s", kind, d, m.epoch, werr, wantCode)
		}
		r.counts["verify "+wantCode.String()]++
	}
}

// answer plays the coordinator answering a commit: durable, failed, or
// (rarely) never.
func (r *creditRun) answer(m *creditMember) {
	if len(r.commits[m]) == 0 {
		return
	}
	seqs := make([]uint64, 0, len(r.commits[m]))
	for seq := range r.commits[m] {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	seq := seqs[r.rng.IntN(len(seqs))]
	c := r.commits[m][seq]
	delete(r.commits[m], seq)
	outcome := r.rng.IntN(10)
	r.core.flushPuts() // the staged writes go to storage (kept by none here)
	switch {
	case outcome < 7:
		r.coord.applyCursor(c.ranges)
		got := m.credit.committed(seq, true)
		m.returned += uint64(got)
		if !c.d.credited {
			// Every copy of the cursor is committed: all their credit
			// comes back.
			copies := 0
			for _, x := range m.deliveries {
				if x.epoch == m.epoch && !x.credited && bytes.Equal(x.cursor, c.d.cursor) {
					x.credited, x.committing = true, 0
					m.want += uint64(x.count)
					copies++
				}
			}
			if copies > 1 {
				r.counts["copies credited at once"]++
			}
		}
		r.note("commit %s seq=%d durable -> %d credit", m.id, seq, got)
		r.counts["commit durable"]++
	case outcome < 9:
		got := m.credit.committed(seq, false)
		m.returned += uint64(got)
		if c.d.committing == seq {
			c.d.committing = 0 // held still, to be acked again
		}
		r.note("commit %s seq=%d failed -> %d credit", m.id, seq, got)
		r.counts["commit failed"]++
	default:
		// Never answered: the delivery stays held and committing.
		r.note("commit %s seq=%d lost", m.id, seq)
		r.counts["commit lost"]++
		return
	}
	// An answer to a commit that is not out returns nothing.
	if got := m.credit.committed(seq, true); got != 0 {
		r.fatalf("a second answer to commit %d returned %d credit", seq, got)
	}
}

func (r *creditRun) check() {
	for _, m := range r.members {
		if m.credit == nil {
			continue
		}
		c := m.credit
		if err := c.checkInvariant(); err != nil {
			r.fatalf("%s: %v", m.id, err)
		}
		if c.inFlight > m.window {
			r.fatalf("%s: in flight %d exceeds the window %d", m.id, c.inFlight, m.window)
		}
		if want := m.inFlight(); c.inFlight != want {
			r.fatalf("%s: in flight %d, the deliveries not committed durably hold %d", m.id, c.inFlight, want)
		}
		if m.returned != m.want {
			r.fatalf("%s: %d credit returned, durable commits account for %d", m.id, m.returned, m.want)
		}
		committing := false
		for _, d := range m.deliveries {
			committing = committing || d.epoch == m.epoch && !d.credited && d.committing != 0
		}
		if want := c.inFlight >= m.window && !committing; c.stalled() != want {
			r.fatalf("%s: stalled %v, want %v (in flight %d of %d, a commit out: %v)", m.id, c.stalled(), want, c.inFlight, m.window, committing)
		}
		if c.stalled() {
			r.counts["stalled"]++
		}
		if c.asked == 0 {
			want := uint32(0)
			if c.inFlight < m.window {
				want = min(c.maxPerPush, m.window-c.inFlight)
			}
			if got := c.budget(); got != want {
				r.fatalf("%s: budget %d, want min(%d, %d − %d)", m.id, got, c.maxPerPush, m.window, c.inFlight)
			}
		}
	}
}

func runCreditProp(t *testing.T, seed uint64, steps int, counts map[string]int) {
	shards := 1 + int(seed%4)
	lim := GroupLimits{Visibility: 10 * time.Second, MaxAttempts: 1000, Session: time.Hour, MaxInFlight: 1 << 20}.withDefaults()
	r := &creditRun{t: t, rng: rand.New(rand.NewPCG(seed, 0x51ed)), now: time.Unix(1_700_000_000, 0),
		commits: map[*creditMember]map[uint64]creditCommit{}, counts: counts}
	r.core = newGroupCore(7, "g", shards, lim)
	r.coord = &groupCoordinator{cfg: GroupCoordinatorConfig{Stream: &StreamHandle{ID: 7}, Group: "g", Secret: []byte("credit-prop-secret")},
		core: r.core}
	for i, id := range []string{"a", "b", "c"} {
		w := uint32(1 + r.rng.IntN(12))
		r.members = append(r.members, &creditMember{id: id, window: w, maxPush: uint32(r.rng.IntN(int(w) + 2))})
		if i == 0 {
			r.join(r.members[0])
		}
	}
	for r.step = 0; r.step < steps; r.step++ {
		m := r.members[r.rng.IntN(len(r.members))]
		switch op := r.rng.IntN(100); {
		case op < 10:
			s := r.core.shards[r.rng.IntN(shards)]
			s.tail += uint64(1 + r.rng.IntN(8))
			r.note("publish shard %d tail=%d", s.index, s.tail)
		case op < 14:
			r.now = r.now.Add(lim.Visibility + time.Second)
			n := r.core.expire(r.now)
			r.note("visibility lapses: %d claims released", n)
		case op < 17:
			r.join(m) // a rebalance, or a rejoin that ends m's membership
		case op < 19:
			r.leave(m)
		case m.credit == nil:
		case op < 35:
			r.ask(m)
		case op < 55:
			r.grant(m)
		case op < 82:
			r.ack(m)
		default:
			r.answer(m)
		}
		r.check()
	}
}

// TestMemberCreditMatchesModel runs 200 seeds of 400 steps (well under a
// second); CREDIT_PROP_SEEDS=n runs n seeds of 3000 steps for a longer soak.
// It fails unless every kind of step it counts happened, so it cannot pass
// without exercising them.
func TestMemberCreditMatchesModel(t *testing.T) {
	seeds, steps := uint64(200), 400
	if n := os.Getenv("CREDIT_PROP_SEEDS"); n != "" {
		seeds, _ = strconv.ParseUint(n, 10, 64)
		steps = 3000
	}
	counts := map[string]int{}
	for seed := range seeds {
		runCreditProp(t, seed, steps, counts)
		if t.Failed() {
			t.Logf("seed %d", seed)
			return
		}
	}
	for _, k := range []string{"ack right", "ack oversized", "ack undersized", "ack forged", "ack tampered", "ack heartbeat",
		"ack no cursor", "verify invalid_cursor", "verify stale_cursor", "verify invalid_request", "commit durable",
		"commit failed", "commit lost", "oversized push", "unasked push", "same cursor pushed again", "copies credited at once", "stalled"} {
		if counts[k] == 0 {
			t.Errorf("no %q in %d seeds", k, seeds)
		}
	}
	t.Logf("%v", counts)
}
