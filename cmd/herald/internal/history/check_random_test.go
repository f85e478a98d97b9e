package history

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// serverState is what the simulated node did with a record's request.
type serverState uint8

const (
	// waiting: the request is at the node, not yet applied or refused.
	waiting serverState = iota
	// written: the record is in the log at its offset.
	written
	// refused: a conditional publish whose expected tail was not the tail.
	refused
	// dropped: the request was lost (a leader died with it) and never
	// will be written.
	dropped
)

// simRecord is one record of the simulated run, as the node and the client
// know it.
type simRecord struct {
	// id is the record's payload id.
	id string
	// shard is the shard it is published to.
	shard uint32
	// cond and expected describe a conditional publish.
	cond     bool
	expected uint64
	// server is what the node did with the latest request.
	server serverState
	// offset is where the record is written (server == written).
	offset uint64
	// outcomes are the outcomes the client recorded, one per ended
	// attempt.
	outcomes []Kind
	// awaiting reports an attempt invoked whose outcome is not recorded.
	awaiting bool
}

// failed reports whether every attempt of r failed definitely.
func (r *simRecord) failed() bool {
	return len(r.outcomes) > 0 && !r.awaiting && !slices.ContainsFunc(r.outcomes, func(k Kind) bool { return k != KindFail })
}

// acked reports whether an attempt of r was acked.
func (r *simRecord) acked() bool { return slices.Contains(r.outcomes, KindAck) }

// simRun is a simulated run: a node with a few shards that applies,
// refuses or drops publishes in an order of the rng's choosing, and clients
// that record what they see. It produces a valid history and its final
// logs.
type simRun struct {
	// rng drives every choice.
	rng *rand.Rand
	// rec records the run.
	rec *Recorder
	// logs are the shards' logs: ids by offset.
	logs [][]string
	// records are every record published, in invoke order.
	records []*simRecord
}

// Errors the simulated clients record.
var (
	errConditionFailed = errors.New("condition failed")
	errNotLeader       = errors.New("not leader")
	errLost            = errors.New("connection lost")
)

// simulate runs steps random steps on shards shards, then lets every
// request finish, and returns the run with retention applied to the final
// logs of some shards.
func simulate(seed uint64, shards, steps int) (*simRun, Final) {
	s := &simRun{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), rec: New(), logs: make([][]string, shards)}
	for range steps {
		switch p := s.rng.IntN(100); {
		case p < 30:
			s.invoke()
		case p < 55:
			s.process(s.pick(func(r *simRecord) bool { return r.server == waiting }))
		case p < 78:
			s.respond(s.pick(func(r *simRecord) bool { return r.awaiting && r.server != waiting }))
		case p < 83:
			s.timeout(s.pick(func(r *simRecord) bool { return r.awaiting && r.server == waiting }))
		case p < 86:
			s.retry(s.pick(func(r *simRecord) bool {
				return !r.awaiting && !r.cond && r.server != waiting && r.outcomes[len(r.outcomes)-1] == KindUnknown
			}))
		default:
			s.read()
		}
	}
	for _, r := range s.records {
		if r.server == waiting {
			s.process(r)
		}
		if r.awaiting {
			s.respond(r)
		}
	}
	final := Final{}
	for sh, ids := range s.logs {
		first := 0
		if s.rng.IntN(4) == 0 {
			first = s.rng.IntN(len(ids) + 1)
		}
		final[uint32(sh)] = LogOf(uint64(first), ids[first:]...)
	}
	return s, final
}

// pick returns a random record that ok accepts, or nil.
func (s *simRun) pick(ok func(*simRecord) bool) *simRecord {
	var rs []*simRecord
	for _, r := range s.records {
		if ok(r) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return rs[s.rng.IntN(len(rs))]
}

// invoke starts a new publish, conditional one time in three (expecting
// the tail as it is now, so that writers racing on one tail are common).
func (s *simRun) invoke() {
	r := &simRecord{id: fmt.Sprintf("r%d", len(s.records)), shard: uint32(s.rng.IntN(len(s.logs))), awaiting: true}
	s.records = append(s.records, r)
	if s.rng.IntN(3) == 0 {
		r.cond, r.expected = true, uint64(len(s.logs[r.shard]))
		s.rec.InvokeIf(r.id, r.shard, r.expected)
		return
	}
	s.rec.Invoke(r.id, r.shard)
}

// process has the node apply r's request: refuse it if it is conditional
// on another tail, drop it now and then, and otherwise write it.
func (s *simRun) process(r *simRecord) {
	if r == nil {
		return
	}
	log := s.logs[r.shard]
	switch {
	case r.cond && uint64(len(log)) != r.expected:
		r.server = refused
	case s.rng.IntN(20) == 0:
		r.server = dropped
	default:
		r.server, r.offset = written, uint64(len(log))
		s.logs[r.shard] = append(log, r.id)
	}
}

// respond records the outcome of r's attempt as the client learns it: the
// truth most of the time, an unknown outcome otherwise.
func (s *simRun) respond(r *simRecord) {
	if r == nil {
		return
	}
	k := KindUnknown
	switch r.server {
	case written:
		if s.rng.IntN(7) != 0 {
			k = KindAck
		}
	case refused:
		if s.rng.IntN(4) != 0 {
			k = KindFail
		}
	case dropped:
		if s.rng.IntN(2) == 0 {
			k = KindFail
		}
	}
	switch k {
	case KindAck:
		s.rec.Ack(r.id, r.shard, r.offset)
	case KindFail:
		err := errNotLeader
		if r.server == refused {
			err = errConditionFailed
		}
		s.rec.Fail(r.id, err)
	default:
		s.rec.Unknown(r.id, errLost)
	}
	r.outcomes = append(r.outcomes, k)
	r.awaiting = false
}

// timeout has the client give up on r's attempt before the node processed
// it; the node may still write it.
func (s *simRun) timeout(r *simRecord) {
	if r == nil {
		return
	}
	s.rec.Unknown(r.id, errLost)
	r.outcomes = append(r.outcomes, KindUnknown)
	r.awaiting = false
}

// retry publishes r again under its id after an unknown outcome, as an
// idempotent producer does: the node acks a written record at its offset
// again, and takes a dropped one as a new request.
func (s *simRun) retry(r *simRecord) {
	if r == nil {
		return
	}
	s.rec.Invoke(r.id, r.shard)
	r.awaiting = true
	if r.server == dropped {
		r.server = waiting
	}
}

// read records a read of a random range of a shard's log as it is now.
func (s *simRun) read() {
	sh := s.rng.IntN(len(s.logs))
	log := s.logs[sh]
	from := s.rng.IntN(len(log) + 1)
	n := s.rng.IntN(min(8, len(log)-from) + 1)
	s.rec.Read(uint32(sh), uint64(from), log[from:from+n])
}

// cloneFinal returns a deep copy of f.
func cloneFinal(f Final) Final {
	c := Final{}
	for s, l := range f {
		c[s] = Log{First: l.First, Entries: slices.Clone(l.Entries)}
	}
	return c
}

// cloneHistory returns a deep copy of h.
func cloneHistory(h History) History {
	c := slices.Clone(h)
	for i := range c {
		c[i].IDs = slices.Clone(c[i].IDs)
	}
	return c
}

// corruption breaks a clean run one way. It returns the edited history and
// final logs and the violations of which at least one must be found (any
// one of want), or ok false when the run offers nothing to break that way.
type corruption func(rng *rand.Rand, s *simRun, h History, f Final) (History, Final, []found, bool)

// corruptions are the ways TestCheckRandom breaks a clean run.
var corruptions = map[string]corruption{
	"drop an acked record": func(rng *rand.Rand, s *simRun, h History, f Final) (History, Final, []found, bool) {
		r := pickRecord(rng, s, func(r *simRecord) bool { return r.acked() && r.offset >= f[r.shard].First })
		if r == nil {
			return nil, nil, nil, false
		}
		l := f[r.shard]
		i := int(r.offset - l.First)
		// The records after it move down one offset, as in a log that
		// lost it and went on appending.
		for j := i + 1; j < len(l.Entries); j++ {
			l.Entries[j].Offset--
		}
		l.Entries = slices.Delete(l.Entries, i, i+1)
		f[r.shard] = l
		return h, f, []found{{RuleAcked, r.id}}, true
	},
	"duplicate a record": func(rng *rand.Rand, s *simRun, h History, f Final) (History, Final, []found, bool) {
		r := pickRecord(rng, s, func(r *simRecord) bool { return r.server == written && r.offset >= f[r.shard].First })
		if r == nil {
			return nil, nil, nil, false
		}
		appendEntry(f, uint32(rng.IntN(len(s.logs))), r.id)
		return h, f, []found{{RuleDuplicate, r.id}}, true
	},
	"write a failed record": func(rng *rand.Rand, s *simRun, h History, f Final) (History, Final, []found, bool) {
		r := pickRecord(rng, s, (*simRecord).failed)
		if r == nil {
			return nil, nil, nil, false
		}
		appendEntry(f, r.shard, r.id)
		return h, f, []found{{RuleFailed, r.id}}, true
	},
	"change a record a read returned": func(rng *rand.Rand, s *simRun, h History, f Final) (History, Final, []found, bool) {
		var reads []int
		for i, e := range h {
			if e.Kind == KindRead && len(e.IDs) > 0 && e.Offset+uint64(len(e.IDs)) > f[e.Shard].First {
				reads = append(reads, i)
			}
		}
		if len(reads) == 0 {
			return nil, nil, nil, false
		}
		e := &h[reads[rng.IntN(len(reads))]]
		lo := int(max(e.Offset, f[e.Shard].First) - e.Offset)
		j := lo + rng.IntN(len(e.IDs)-lo)
		// Another record of the run, or one nobody published.
		other := s.records[rng.IntN(len(s.records))].id
		if other == e.IDs[j] {
			other = "bogus"
		}
		e.IDs[j] = other
		return h, f, []found{{RuleRead, other}}, true
	},
	"read a record that was never written": func(rng *rand.Rand, s *simRun, h History, f Final) (History, Final, []found, bool) {
		r := pickRecord(rng, s, func(r *simRecord) bool { return r.server != written })
		if r == nil {
			return nil, nil, nil, false
		}
		end := f[r.shard].First + uint64(len(f[r.shard].Entries))
		h = append(h, Event{Seq: h[len(h)-1].Seq + 1, Kind: KindRead, Shard: r.shard, Offset: end, IDs: []string{r.id}})
		return h, f, []found{{RuleRead, r.id}}, true
	},
	"read a record before its publish": func(rng *rand.Rand, s *simRun, h History, f Final) (History, Final, []found, bool) {
		r := pickRecord(rng, s, func(r *simRecord) bool { return r.server == written })
		if r == nil {
			return nil, nil, nil, false
		}
		i := slices.IndexFunc(h, func(e Event) bool { return e.Kind == KindInvoke && e.ID == r.id })
		h = slices.Insert(h, i, Event{Kind: KindRead, Shard: r.shard, Offset: r.offset, IDs: []string{r.id}})
		for j := range h {
			h[j].Seq = uint64(j) + 1
		}
		return h, f, []found{{RulePhantom, r.id}}, true
	},
	"give a tail two conditional winners": func(rng *rand.Rand, s *simRun, h History, f Final) (History, Final, []found, bool) {
		type pair struct{ winner, loser *simRecord }
		var pairs []pair
		for _, w := range s.records {
			if !w.cond || !w.acked() {
				continue
			}
			for _, l := range s.records {
				if l.cond && l.shard == w.shard && l.expected == w.expected && l.failed() {
					pairs = append(pairs, pair{w, l})
				}
			}
		}
		if len(pairs) == 0 {
			return nil, nil, nil, false
		}
		p := pairs[rng.IntN(len(pairs))]
		i := slices.IndexFunc(h, func(e Event) bool { return e.Kind == KindFail && e.ID == p.loser.id })
		h[i] = Event{Seq: h[i].Seq, Kind: KindAck, ID: p.loser.id, Shard: p.loser.shard, Offset: p.loser.expected}
		return h, f, []found{{RuleConditional, p.winner.id}, {RuleConditional, p.loser.id}}, true
	},
}

// pickRecord returns a random record of s that ok accepts, or nil.
func pickRecord(rng *rand.Rand, s *simRun, ok func(*simRecord) bool) *simRecord {
	var rs []*simRecord
	for _, r := range s.records {
		if ok(r) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return rs[rng.IntN(len(rs))]
}

// appendEntry appends id to the final log of shard, at its next offset.
func appendEntry(f Final, shard uint32, id string) {
	l := f[shard]
	l.Entries = append(l.Entries, Entry{Offset: l.First + uint64(len(l.Entries)), ID: id})
	f[shard] = l
}

// TestCheckRandom simulates many random runs (acks, failures, unknown
// outcomes, timeouts, retries, racing conditional writers, reads,
// retention) and expects each clean, then breaks each run in every way of
// corruptions, one at a time, and expects the checker to catch it. The
// summed summary shows the runs exercised what they claim to.
func TestCheckRandom(t *testing.T) {
	const seeds = 100
	var total Summary
	applied := map[string]int{}
	for seed := range uint64(seeds) {
		s, final := simulate(seed, 3, 300)
		h := s.rec.History()
		if vs := Check(h, final); len(vs) != 0 {
			t.Fatalf("seed %d: clean run has %d violations:%s", seed, len(vs), messages(vs))
		}
		sum := Summarize(h, final)
		total.Events += sum.Events
		total.Reads += sum.Reads
		total.Records += sum.Records
		total.Attempts += sum.Attempts
		total.Publishes += sum.Publishes
		total.Acked += sum.Acked
		total.Failed += sum.Failed
		total.Unknown += sum.Unknown
		total.UnknownPresent += sum.UnknownPresent
		total.ConditionalWon += sum.ConditionalWon
		total.Conditional += sum.Conditional
		total.ReadRecords += sum.ReadRecords
		total.Trimmed += sum.Trimmed
		if sum.Lost != 0 || sum.Duplicated != 0 {
			t.Fatalf("seed %d: clean run summary %v", seed, sum)
		}

		rng := rand.New(rand.NewPCG(seed, 1))
		for _, name := range slices.Sorted(maps.Keys(corruptions)) {
			bh, bf, want, ok := corruptions[name](rng, s, cloneHistory(h), cloneFinal(final))
			if !ok {
				continue
			}
			applied[name]++
			vs := Check(bh, bf)
			if !slices.ContainsFunc(reduce(vs), func(f found) bool { return slices.Contains(want, f) }) {
				t.Errorf("seed %d, %s: want one of %v, found:%s", seed, name, want, messages(vs))
			}
		}
	}
	t.Logf("over %d runs: %v; corruptions applied: %v", seeds, total, applied)
	if total.Acked == 0 || total.Failed == 0 || total.Unknown == 0 || total.UnknownPresent == 0 ||
		total.UnknownPresent == total.Unknown || total.ConditionalWon == 0 || total.Conditional == total.ConditionalWon ||
		total.ReadRecords == 0 || total.Trimmed == 0 || total.Attempts == total.Publishes {
		t.Errorf("the runs did not exercise every outcome: %v", total)
	}
	for name := range corruptions {
		if applied[name] < seeds/2 {
			t.Errorf("corruption %q applied to %d of %d runs only", name, applied[name], seeds)
		}
	}
}
