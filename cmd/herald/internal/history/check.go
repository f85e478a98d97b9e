package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Entry is one record of a shard's final log.
type Entry struct {
	// Offset is the record's offset in the shard.
	Offset uint64
	// ID is the record's payload id, as the test decoded it from the
	// record.
	ID string
}

// Log is one shard's log as the test read it back after the run.
type Log struct {
	// First is the shard's first offset: 0 unless retention deleted the
	// head of the log. A run without retention leaves it 0 whatever the
	// node says, so that a shard that lost its head is reported instead of
	// excused; below First the checker verifies nothing.
	First uint64
	// Entries are the records in the order they were read back, which must
	// be offsets First, First+1, First+2... (RuleContiguous).
	Entries []Entry
}

// LogOf returns the Log from first whose entries are ids at consecutive
// offsets, as a test that reads a shard back from first builds it.
func LogOf(first uint64, ids ...string) Log {
	l := Log{First: first, Entries: make([]Entry, len(ids))}
	for i, id := range ids {
		l.Entries[i] = Entry{Offset: first + uint64(i), ID: id}
	}
	return l
}

// Final is the final log of each shard, by shard index. A shard that is
// absent is an empty log from offset 0.
type Final map[uint32]Log

// Rule names the property a Violation breaks; doc.go states each.
type Rule string

const (
	// RuleHistory: the recorded history is malformed (an outcome with no
	// open Invoke of its id, an id invoked again before the previous
	// attempt's outcome or on another shard, events out of order).
	RuleHistory Rule = "history"
	// RuleAcked: an acknowledged record is not in the final log at the
	// shard and offset its ack gave (lost, or moved), or was acked on
	// another shard than it was published to.
	RuleAcked Rule = "acked"
	// RuleDuplicate: a record is in the final logs more than once (in one
	// shard or several), or was acked at two different places.
	RuleDuplicate Rule = "duplicate"
	// RuleForeign: a final log holds a record no publish invoked, or a
	// record published to another shard.
	RuleForeign Rule = "foreign"
	// RuleFailed: a record whose publish failed definitely is in a final
	// log.
	RuleFailed Rule = "failed"
	// RuleRead: a read returned, at some offset, another record than the
	// final log holds there, or a record at an offset the final log lacks
	// (an uncommitted or lost record).
	RuleRead Rule = "read"
	// RulePhantom: a read returned a record before any publish of it was
	// invoked, or a record never published.
	RulePhantom Rule = "phantom"
	// RuleConditional: two conditional publishes won at one shard and
	// expected tail, or a conditional record was acked or is in the final
	// log at another offset than its expected tail.
	RuleConditional Rule = "conditional"
	// RuleContiguous: a final log's offsets are not First, First+1...: a
	// gap, a repeat or a step back.
	RuleContiguous Rule = "contiguous"
	// RuleReplicas: two replicas' final logs of a shard differ
	// (CompareReplicas).
	RuleReplicas Rule = "replicas"
)

// Violation is one breach of a rule, described for a human.
type Violation struct {
	// Rule is the rule broken.
	Rule Rule
	// ID is the record the violation is about (the first one, when it is
	// about several); empty when it is about no one record, such as a gap
	// in a log.
	ID string
	// Message says what was found, naming records, shards, offsets and
	// the Seq of the events involved.
	Message string
}

// String returns the violation as "rule: message".
func (v Violation) String() string { return string(v.Rule) + ": " + v.Message }

// Summary counts what a history and its final logs hold, for the notes of a
// fault test. Records are counted by id: a retried record is one publish.
type Summary struct {
	// Events is the number of events in the history.
	Events int
	// Publishes is the number of distinct records invoked.
	Publishes int
	// Attempts is the number of Invoke events (Publishes plus retries).
	Attempts int
	// Acked is the number of records acked at least once.
	Acked int
	// Failed is the number of records every attempt of which failed
	// definitely.
	Failed int
	// Unknown is the number of records neither acked nor failed: an
	// attempt's outcome was unknown or never recorded.
	Unknown int
	// UnknownPresent is how many of the Unknown records are in a final log.
	UnknownPresent int
	// Conditional is the number of records published only conditionally.
	Conditional int
	// ConditionalWon is how many of the Conditional records were acked.
	ConditionalWon int
	// Reads is the number of Read events.
	Reads int
	// ReadRecords is the number of records those reads returned.
	ReadRecords int
	// Records is the number of entries in the final logs.
	Records int
	// Lost is the number of acked records in no final log (not counting
	// Trimmed ones).
	Lost int
	// Duplicated is the number of records in the final logs more than
	// once.
	Duplicated int
	// Trimmed is the number of acked records below their shard's First,
	// which retention may have deleted and the checker cannot verify.
	Trimmed int
}

// String returns the summary on one line, for a test's log.
func (s Summary) String() string {
	return fmt.Sprintf("%d events: %d publishes (%d attempts): %d acked, %d failed, %d unknown (%d present); "+
		"%d conditional (%d won); %d reads of %d records; final logs %d records; %d lost, %d duplicated, %d trimmed",
		s.Events, s.Publishes, s.Attempts, s.Acked, s.Failed, s.Unknown, s.UnknownPresent,
		s.Conditional, s.ConditionalWon, s.Reads, s.ReadRecords, s.Records, s.Lost, s.Duplicated, s.Trimmed)
}

// Check verifies history h against final, the shards' logs read back after
// the run, and returns every violation found (nil when there is none), in
// an order that depends only on h and final. It does not compare replicas:
// see CompareReplicas.
func Check(h History, final Final) []Violation {
	return analyze(h, final).violations
}

// Summarize returns the counts of h and final that a fault test prints.
func Summarize(h History, final Final) Summary {
	return analyze(h, final).summary
}

// CompareReplicas checks that the final logs of several replicas, by
// replica name, agree: for each shard, every replica's log ends at the same
// offset and holds the same record at every offset they all hold (at or
// above the largest First, since retention may run apart on each replica).
// A shard absent from a replica is an empty log from 0. It returns a
// RuleReplicas violation per shard and replica that differs from the first
// replica by name.
func CompareReplicas(replicas map[string]Final) []Violation {
	names := slices.Sorted(maps.Keys(replicas))
	if len(names) < 2 {
		return nil
	}
	shardSet := map[uint32]bool{}
	for _, f := range replicas {
		for s := range f {
			shardSet[s] = true
		}
	}
	var vs []Violation
	base := names[0]
	for _, s := range slices.Sorted(maps.Keys(shardSet)) {
		bl := indexLog(replicas[base][s])
		for _, name := range names[1:] {
			ol := indexLog(replicas[name][s])
			if bl.end != ol.end {
				vs = append(vs, Violation{Rule: RuleReplicas, Message: fmt.Sprintf(
					"shard %d: replica %s's log ends at offset %d, replica %s's at %d", s, base, bl.end, name, ol.end)})
			}
			lo, hi := max(bl.first, ol.first), min(bl.end, ol.end)
			diffs, at := 0, uint64(0)
			for o := lo; o < hi; o++ {
				b, bok := bl.ids[o]
				x, xok := ol.ids[o]
				if b != x || bok != xok {
					if diffs == 0 {
						at = o
					}
					diffs++
				}
			}
			if diffs > 0 {
				vs = append(vs, Violation{Rule: RuleReplicas, ID: bl.ids[at], Message: fmt.Sprintf(
					"shard %d: replicas %s and %s differ at %d offsets, first at %d: %s vs %s",
					s, base, name, diffs, at, describeAt(bl, at), describeAt(ol, at))})
			}
		}
	}
	return vs
}

// describeAt names the record l holds at offset o, or says it holds none.
func describeAt(l shardIndex, o uint64) string {
	if id, ok := l.ids[o]; ok {
		return fmt.Sprintf("%q", id)
	}
	return "nothing"
}

// attempt is one Invoke of a record and its outcome.
type attempt struct {
	// invoke is the Invoke event.
	invoke Event
	// outcome is the Ack, Fail or Unknown event; its Kind is 0 while the
	// attempt is open.
	outcome Event
}

// record is everything the history says of one payload id.
type record struct {
	// id is the payload id.
	id string
	// shard is the shard the first attempt published to.
	shard uint32
	// attempts are the record's attempts in Seq order; at least one.
	attempts []attempt
}

// open reports whether the record's last attempt has no outcome yet.
func (r *record) open() bool { return r.attempts[len(r.attempts)-1].outcome.Kind == 0 }

// status returns KindAck if an attempt was acked, KindFail if every
// attempt failed definitely, and KindUnknown otherwise.
func (r *record) status() Kind {
	failed := true
	for _, a := range r.attempts {
		switch a.outcome.Kind {
		case KindAck:
			return KindAck
		case KindFail:
		default:
			failed = false
		}
	}
	if failed {
		return KindFail
	}
	return KindUnknown
}

// conditional reports whether every attempt was conditional, and returns
// their expected tails: the only offsets the record may be written at.
func (r *record) conditional() (bool, []uint64) {
	var tails []uint64
	for _, a := range r.attempts {
		if !a.invoke.Conditional {
			return false, nil
		}
		if !slices.Contains(tails, a.invoke.Expected) {
			tails = append(tails, a.invoke.Expected)
		}
	}
	return true, tails
}

// failure returns the outcome event of the record's last failed attempt,
// for messages.
func (r *record) failure() Event {
	var e Event
	for _, a := range r.attempts {
		if a.outcome.Kind == KindFail {
			e = a.outcome
		}
	}
	return e
}

// acks returns the record's Ack events, the first for each distinct place
// acked.
func (r *record) acks() []Event {
	var acks []Event
	var seen []place
	for _, a := range r.attempts {
		if a.outcome.Kind != KindAck {
			continue
		}
		if p := ackPlace(a.outcome); !slices.Contains(seen, p) {
			seen = append(seen, p)
			acks = append(acks, a.outcome)
		}
	}
	return acks
}

// ackPlaces returns the distinct places the record was acked at, in the
// order of acks.
func (r *record) ackPlaces() []place {
	acks := r.acks()
	ps := make([]place, len(acks))
	for i, a := range acks {
		ps[i] = ackPlace(a)
	}
	return ps
}

// ackPlace returns the shard and offset an Ack event gave.
func ackPlace(e Event) place { return place{shard: e.Shard, offset: e.Offset} }

// place is where a record is, or was acked: a shard and an offset.
type place struct {
	// shard is the shard index.
	shard uint32
	// offset is the offset in the shard.
	offset uint64
}

// String returns "shard S offset O".
func (p place) String() string { return fmt.Sprintf("shard %d offset %d", p.shard, p.offset) }

// shardIndex is a final log by offset.
type shardIndex struct {
	// first is the log's First.
	first uint64
	// end is one past the largest offset held, or first when the log is
	// empty.
	end uint64
	// ids is the record at each offset held (the first entry listed, if an
	// offset repeats).
	ids map[uint64]string
}

// indexLog returns l by offset.
func indexLog(l Log) shardIndex {
	x := shardIndex{first: l.First, end: l.First, ids: make(map[uint64]string, len(l.Entries))}
	for _, e := range l.Entries {
		if _, ok := x.ids[e.Offset]; !ok {
			x.ids[e.Offset] = e.ID
		}
		x.end = max(x.end, e.Offset+1)
	}
	return x
}

// conditionKey is a shard and an expected tail: where conditional writers
// compete.
type conditionKey struct {
	// shard is the shard index.
	shard uint32
	// expected is the expected tail.
	expected uint64
}

// checker is one run of Check over a history and its final logs. It is
// used by one goroutine and thrown away.
type checker struct {
	// records are the published records by id.
	records map[string]*record
	// order are the ids of records in the order of their first Invoke.
	order []string
	// reads are the Read events in Seq order.
	reads []Event
	// shards are the final logs by shard; a missing shard is empty from 0.
	shards map[uint32]shardIndex
	// places are where each id is in the final logs, in shard then entry
	// order.
	places map[string][]place
	// violations are those found so far.
	violations []Violation
	// summary is counted along the way.
	summary Summary
}

// analyze checks h against final and counts them.
func analyze(h History, final Final) *checker {
	c := &checker{
		records: map[string]*record{},
		shards:  map[uint32]shardIndex{},
		places:  map[string][]place{},
	}
	c.summary.Events = len(h)
	c.replay(h)
	c.indexFinal(final)
	c.checkFinal()
	c.checkRecords()
	c.checkReads()
	return c
}

// report adds a violation.
func (c *checker) report(rule Rule, id, format string, args ...any) {
	c.violations = append(c.violations, Violation{Rule: rule, ID: id, Message: fmt.Sprintf(format, args...)})
}

// shard returns the final log of shard s (empty from 0 if there is none).
func (c *checker) shard(s uint32) shardIndex {
	if x, ok := c.shards[s]; ok {
		return x
	}
	return shardIndex{}
}

// replay pairs each publish outcome with its Invoke and gathers the reads,
// reporting a malformed history under RuleHistory.
func (c *checker) replay(h History) {
	for i, e := range h {
		if i > 0 && e.Seq <= h[i-1].Seq {
			c.report(RuleHistory, e.ID, "event %d (%s, seq %d) does not come after seq %d", i, e.Kind, e.Seq, h[i-1].Seq)
		}
		switch e.Kind {
		case KindInvoke:
			c.summary.Attempts++
			if e.ID == "" {
				c.report(RuleHistory, "", "invoke at seq %d has an empty id", e.Seq)
				continue
			}
			r := c.records[e.ID]
			if r == nil {
				r = &record{id: e.ID, shard: e.Shard}
				c.records[e.ID] = r
				c.order = append(c.order, e.ID)
			} else if r.open() {
				c.report(RuleHistory, e.ID, "record %q invoked again at seq %d while its attempt invoked at seq %d has no outcome",
					e.ID, e.Seq, r.attempts[len(r.attempts)-1].invoke.Seq)
			} else if e.Shard != r.shard {
				c.report(RuleHistory, e.ID, "record %q invoked at seq %d on shard %d, its first attempt on shard %d",
					e.ID, e.Seq, e.Shard, r.shard)
			}
			r.attempts = append(r.attempts, attempt{invoke: e})
		case KindAck, KindFail, KindUnknown:
			r := c.records[e.ID]
			if r == nil || !r.open() {
				c.report(RuleHistory, e.ID, "%s of record %q at seq %d follows no invoke awaiting an outcome", e.Kind, e.ID, e.Seq)
				continue
			}
			r.attempts[len(r.attempts)-1].outcome = e
		case KindRead:
			c.reads = append(c.reads, e)
		default:
			c.report(RuleHistory, e.ID, "event at seq %d has unknown kind %d", e.Seq, e.Kind)
		}
	}
}

// indexFinal indexes the final logs, reporting their breaks under
// RuleContiguous.
func (c *checker) indexFinal(final Final) {
	for _, s := range slices.Sorted(maps.Keys(final)) {
		l := final[s]
		c.shards[s] = indexLog(l)
		c.summary.Records += len(l.Entries)
		next := l.First
		for i, e := range l.Entries {
			switch {
			case e.Offset > next:
				c.report(RuleContiguous, "", "shard %d: the final log lacks offsets %d to %d (entry %d, %q, is at offset %d)",
					s, next, e.Offset-1, i, e.ID, e.Offset)
			case e.Offset < next && i == 0:
				c.report(RuleContiguous, e.ID, "shard %d: the final log's first entry, %q, is at offset %d, below its first offset %d",
					s, e.ID, e.Offset, l.First)
			case e.Offset < next:
				c.report(RuleContiguous, e.ID, "shard %d: entry %d of the final log, %q, is at offset %d, not after offset %d",
					s, i, e.ID, e.Offset, next-1)
			}
			c.places[e.ID] = append(c.places[e.ID], place{shard: s, offset: e.Offset})
			next = e.Offset + 1
		}
	}
}

// checkFinal checks each record in the final logs: once only, published to
// its shard, not failed, and where a conditional publish may be.
func (c *checker) checkFinal() {
	for _, id := range slices.Sorted(maps.Keys(c.places)) {
		ps := c.places[id]
		r := c.records[id]
		switch {
		case len(ps) > 1:
			c.summary.Duplicated++
			c.report(RuleDuplicate, id, "record %q (%s) is in the final logs %d times: %s", id, c.describe(r), len(ps), joinPlaces(ps))
		case r == nil:
			c.report(RuleForeign, id, "%s of the final log holds record %q, which no publish invoked", ps[0], id)
		case ps[0].shard != r.shard:
			c.report(RuleForeign, id, "record %q, published to shard %d, is in the final log at %s", id, r.shard, ps[0])
		}
		if r == nil {
			continue
		}
		if r.status() == KindFail {
			f := r.failure()
			c.report(RuleFailed, id, "record %q failed definitely (seq %d: %v) but is in the final log at %s", id, f.Seq, f.Err, joinPlaces(ps))
		}
		if cond, tails := r.conditional(); cond {
			acked := r.ackPlaces()
			for _, p := range ps {
				// An ack off the expected tail is reported once, by
				// checkRecords, not again for the record found there.
				if !slices.Contains(tails, p.offset) && !slices.Contains(acked, p) {
					c.report(RuleConditional, id, "conditional record %q expected tail %s but is in the final log at %s",
						id, joinOffsets(tails), p)
				}
			}
		}
	}
}

// checkRecords checks each published record's acks against the final logs
// and the conditional publishes' winners, and counts outcomes.
func (c *checker) checkRecords() {
	winners := map[conditionKey][]Event{}
	for _, id := range c.order {
		r := c.records[id]
		c.summary.Publishes++
		present := len(c.places[id]) > 0
		switch r.status() {
		case KindAck:
			c.summary.Acked++
		case KindFail:
			c.summary.Failed++
		default:
			c.summary.Unknown++
			if present {
				c.summary.UnknownPresent++
			}
		}
		cond, _ := r.conditional()
		if cond {
			c.summary.Conditional++
			if r.status() == KindAck {
				c.summary.ConditionalWon++
			}
		}

		for _, a := range r.attempts {
			if a.outcome.Kind != KindAck || !a.invoke.Conditional {
				continue
			}
			k := conditionKey{shard: r.shard, expected: a.invoke.Expected}
			if !slices.ContainsFunc(winners[k], func(e Event) bool { return e.ID == id }) {
				winners[k] = append(winners[k], a.outcome)
			}
			if a.outcome.Offset != a.invoke.Expected {
				c.report(RuleConditional, id, "conditional record %q expected tail %d (seq %d) but was acked at offset %d (seq %d)",
					id, a.invoke.Expected, a.invoke.Seq, a.outcome.Offset, a.outcome.Seq)
			}
		}
		acks := r.acks()
		ackPlaces := r.ackPlaces()
		if len(ackPlaces) > 1 {
			c.report(RuleDuplicate, id, "record %q was acked at %d places: %s", id, len(ackPlaces), joinPlaces(ackPlaces))
		}
		trimmed, lost := false, false
		for i, p := range ackPlaces {
			ack := acks[i]
			if p.shard != r.shard {
				c.report(RuleAcked, id, "record %q, published to shard %d, was acked at %s (seq %d)", id, r.shard, p, ack.Seq)
				continue
			}
			x := c.shard(p.shard)
			if p.offset < x.first {
				trimmed = true
				continue
			}
			got, ok := x.ids[p.offset]
			switch {
			case ok && got == id:
			case !present:
				lost = true
				c.report(RuleAcked, id, "record %q acked at %s (seq %d) is in no final log; %s", id, p, ack.Seq, describeOffset(x, p))
			default:
				c.report(RuleAcked, id, "record %q acked at %s (seq %d) is in the final log at %s instead; %s",
					id, p, ack.Seq, joinPlaces(c.places[id]), describeOffset(x, p))
			}
		}
		if trimmed {
			c.summary.Trimmed++
		}
		if lost {
			c.summary.Lost++
		}
	}
	keys := slices.SortedFunc(maps.Keys(winners), func(a, b conditionKey) int {
		return cmp.Or(cmp.Compare(a.shard, b.shard), cmp.Compare(a.expected, b.expected))
	})
	for _, k := range keys {
		ws := winners[k]
		if len(ws) < 2 {
			continue
		}
		names := make([]string, len(ws))
		for i, w := range ws {
			names[i] = fmt.Sprintf("%q (acked at seq %d)", w.ID, w.Seq)
		}
		c.report(RuleConditional, ws[0].ID, "shard %d, expected tail %d: %d conditional publishes won: %s",
			k.shard, k.expected, len(ws), strings.Join(names, ", "))
	}
}

// checkReads checks every read against the final logs and against the
// order of the publishes it returned.
func (c *checker) checkReads() {
	for _, rd := range c.reads {
		c.summary.Reads++
		c.summary.ReadRecords += len(rd.IDs)
		x := c.shard(rd.Shard)
		bad, first, firstID := 0, "", ""
		for i, id := range rd.IDs {
			o := rd.Offset + uint64(i)
			if o < x.first {
				continue
			}
			got, ok := x.ids[o]
			if ok && got == id {
				continue
			}
			if bad == 0 {
				firstID = id
				if ok {
					first = fmt.Sprintf("offset %d: the read returned %q, the final log holds %q", o, id, got)
				} else {
					first = fmt.Sprintf("offset %d: the read returned %q, the final log holds nothing there (%s)", o, id, describeRange(x))
				}
			}
			bad++
		}
		if bad > 0 {
			c.report(RuleRead, firstID, "read of shard %d from offset %d (seq %d, %d records) disagrees with the final log at %d offsets; first at %s",
				rd.Shard, rd.Offset, rd.Seq, len(rd.IDs), bad, first)
		}
		for i, id := range rd.IDs {
			o := rd.Offset + uint64(i)
			r := c.records[id]
			switch {
			case r == nil:
				c.report(RulePhantom, id, "read of shard %d (seq %d) returned record %q at offset %d, which no publish invoked",
					rd.Shard, rd.Seq, id, o)
			case r.attempts[0].invoke.Seq > rd.Seq:
				c.report(RulePhantom, id, "read of shard %d (seq %d) returned record %q at offset %d before its publish was invoked (seq %d)",
					rd.Shard, rd.Seq, id, o, r.attempts[0].invoke.Seq)
			}
		}
	}
}

// describe returns a record's outcome for a message: "acked", "failed",
// "outcome unknown" or "never published".
func (c *checker) describe(r *record) string {
	if r == nil {
		return "never published"
	}
	switch r.status() {
	case KindAck:
		return "acked"
	case KindFail:
		return "failed"
	}
	return "outcome unknown"
}

// describeOffset says what the final log x holds at p's offset.
func describeOffset(x shardIndex, p place) string {
	if id, ok := x.ids[p.offset]; ok {
		return fmt.Sprintf("that offset holds %q", id)
	}
	return "the final log holds nothing there (" + describeRange(x) + ")"
}

// describeRange says which offsets x spans.
func describeRange(x shardIndex) string {
	if len(x.ids) == 0 {
		return fmt.Sprintf("it is empty from offset %d", x.first)
	}
	return fmt.Sprintf("it spans offsets %d to %d", x.first, x.end-1)
}

// joinPlaces returns ps as "shard 0 offset 3, shard 1 offset 7".
func joinPlaces(ps []place) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// joinOffsets returns os as "3" or "3 or 5".
func joinOffsets(os []uint64) string {
	s := make([]string, len(os))
	for i, o := range os {
		s[i] = fmt.Sprint(o)
	}
	return strings.Join(s, " or ")
}
