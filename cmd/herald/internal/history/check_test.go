package history

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Errors the synthetic histories record as outcomes.
var (
	errRefused = errors.New("refused")
	errTimeout = errors.New("timeout")
)

// found is a violation reduced to what the tables assert: its rule and the
// record it names.
type found struct {
	// rule is the rule broken.
	rule Rule
	// id is the record named, or "".
	id string
}

// reduce returns the (rule, id) of each violation, sorted.
func reduce(vs []Violation) []found {
	fs := make([]found, len(vs))
	for i, v := range vs {
		fs[i] = found{v.Rule, v.ID}
	}
	slices.SortFunc(fs, func(a, b found) int { return cmp.Or(cmp.Compare(a.rule, b.rule), cmp.Compare(a.id, b.id)) })
	return fs
}

// messages returns the violations one a line, for failure output.
func messages(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "\n\t%v", v)
	}
	return b.String()
}

// publish records a's publish to shard and its ack at offset.
func publish(r *Recorder, id string, shard uint32, offset uint64) {
	r.Invoke(id, shard)
	r.Ack(id, shard, offset)
}

// TestCheck runs one synthetic history per rule (and the cases that are
// not violations) and expects exactly the violations listed, no more.
func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		build func(r *Recorder)
		// edit, if set, changes the recorded history before the check.
		edit  func(h History) History
		final Final
		want  []found
	}{
		{
			name: "clean history with every outcome",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				r.Invoke("b", 0)
				r.Read(0, 0, []string{"a", "b"}) // b read before its ack is recorded
				r.Ack("b", 0, 1)
				r.Invoke("c", 0)
				r.Fail("c", errRefused) // failed, absent
				r.Invoke("d", 0)
				r.Unknown("d", errTimeout) // unknown, present once
				r.Invoke("e", 1)
				r.Unknown("e", errTimeout) // unknown, absent
				r.Invoke("f", 1)           // no outcome ever recorded, present
				r.InvokeIf("g", 1, 1)
				r.InvokeIf("h", 1, 1)
				r.Ack("g", 1, 1)
				r.Fail("h", errRefused) // the conditional loser
				r.Read(1, 0, []string{"f"})
				r.Read(1, 1, []string{"g"})
				r.Read(0, 1, []string{"b"}) // a read shorter than the log
				r.Read(0, 3, nil)           // an empty read at the tail
				r.Invoke("i", 2)
				r.Unknown("i", errTimeout)
				r.Invoke("i", 2) // a retry of the same record
				r.Ack("i", 2, 0)
			},
			final: Final{0: LogOf(0, "a", "b", "d"), 1: LogOf(0, "f", "g"), 2: LogOf(0, "i")},
		},
		{
			name: "acked record lost",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				publish(r, "b", 0, 1)
			},
			final: Final{0: LogOf(0, "a")},
			want:  []found{{RuleAcked, "b"}},
		},
		{
			name: "acked records moved",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				publish(r, "b", 0, 1)
			},
			final: Final{0: LogOf(0, "b", "a")},
			want:  []found{{RuleAcked, "a"}, {RuleAcked, "b"}},
		},
		{
			name: "ack names another shard",
			build: func(r *Recorder) {
				r.Invoke("a", 0)
				r.Ack("a", 1, 0)
			},
			final: Final{0: LogOf(0, "a")},
			want:  []found{{RuleAcked, "a"}},
		},
		{
			name: "head lost without retention",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				publish(r, "b", 0, 1)
			},
			final: Final{0: {Entries: []Entry{{1, "b"}}}},
			want:  []found{{RuleAcked, "a"}, {RuleContiguous, ""}},
		},
		{
			name: "head deleted by retention",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				publish(r, "b", 0, 1)
				r.Read(0, 0, []string{"a", "b"}) // from below First
			},
			final: Final{0: LogOf(1, "b")},
		},
		{
			name:  "duplicate in one shard",
			build: func(r *Recorder) { publish(r, "a", 0, 0) },
			final: Final{0: LogOf(0, "a", "a")},
			want:  []found{{RuleDuplicate, "a"}},
		},
		{
			name:  "duplicate across shards",
			build: func(r *Recorder) { publish(r, "a", 0, 0) },
			final: Final{0: LogOf(0, "a"), 1: LogOf(0, "a")},
			want:  []found{{RuleDuplicate, "a"}},
		},
		{
			name: "retry acked at a second offset",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				publish(r, "a", 0, 1)
			},
			final: Final{0: LogOf(0, "a", "a")},
			want:  []found{{RuleDuplicate, "a"}, {RuleDuplicate, "a"}},
		},
		{
			name: "unknown present twice",
			build: func(r *Recorder) {
				r.Invoke("a", 0)
				r.Unknown("a", errTimeout)
			},
			final: Final{0: LogOf(0, "a", "a")},
			want:  []found{{RuleDuplicate, "a"}},
		},
		{
			name: "retry after unknown written twice",
			build: func(r *Recorder) {
				r.Invoke("a", 0)
				r.Unknown("a", errTimeout)
				publish(r, "a", 0, 1)
			},
			final: Final{0: LogOf(0, "a", "a")},
			want:  []found{{RuleDuplicate, "a"}},
		},
		{
			name: "failed present",
			build: func(r *Recorder) {
				r.Invoke("a", 0)
				r.Fail("a", errRefused)
			},
			final: Final{0: LogOf(0, "a")},
			want:  []found{{RuleFailed, "a"}},
		},
		{
			name:  "record never published",
			build: func(r *Recorder) {},
			final: Final{0: LogOf(0, "z")},
			want:  []found{{RuleForeign, "z"}},
		},
		{
			name: "record in another shard",
			build: func(r *Recorder) {
				r.Invoke("a", 0)
				r.Unknown("a", errTimeout)
			},
			final: Final{1: LogOf(0, "a")},
			want:  []found{{RuleForeign, "a"}},
		},
		{
			name: "read disagrees with the final log",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				publish(r, "b", 0, 1)
				r.Read(0, 0, []string{"b", "a"})
			},
			final: Final{0: LogOf(0, "a", "b")},
			want:  []found{{RuleRead, "b"}},
		},
		{
			name: "read of an uncommitted record",
			build: func(r *Recorder) {
				r.Invoke("a", 0)
				r.Read(0, 0, []string{"a"})
				r.Unknown("a", errTimeout)
			},
			final: Final{0: LogOf(0)},
			want:  []found{{RuleRead, "a"}},
		},
		{
			name: "read of a shard the final logs lack",
			build: func(r *Recorder) {
				r.Invoke("a", 3)
				r.Read(3, 0, []string{"a"})
				r.Unknown("a", errTimeout)
			},
			final: Final{},
			want:  []found{{RuleRead, "a"}},
		},
		{
			name: "read past the final log's end",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				r.Invoke("b", 0)
				r.Fail("b", errRefused)
				r.Read(0, 0, []string{"a", "b"})
			},
			final: Final{0: LogOf(0, "a")},
			want:  []found{{RuleRead, "b"}},
		},
		{
			name: "read before the publish was invoked",
			build: func(r *Recorder) {
				r.Read(0, 0, []string{"a"})
				publish(r, "a", 0, 0)
			},
			final: Final{0: LogOf(0, "a")},
			want:  []found{{RulePhantom, "a"}},
		},
		{
			name:  "read of a record never published",
			build: func(r *Recorder) { r.Read(0, 0, []string{"z"}) },
			final: Final{0: LogOf(0, "z")},
			want:  []found{{RuleForeign, "z"}, {RulePhantom, "z"}},
		},
		{
			name: "two conditional winners",
			build: func(r *Recorder) {
				r.InvokeIf("a", 0, 0)
				r.InvokeIf("b", 0, 0)
				r.Ack("a", 0, 0)
				r.Ack("b", 0, 0)
			},
			final: Final{0: LogOf(0, "a")},
			// The second winner's ack is also wrong: offset 0 holds a.
			want: []found{{RuleAcked, "b"}, {RuleConditional, "a"}},
		},
		{
			name: "conditional winner acked off its expected tail",
			build: func(r *Recorder) {
				publish(r, "x", 0, 0)
				r.InvokeIf("a", 0, 0)
				r.Ack("a", 0, 1)
			},
			final: Final{0: LogOf(0, "x", "a")},
			want:  []found{{RuleConditional, "a"}},
		},
		{
			name: "conditional unknown written off its expected tail",
			build: func(r *Recorder) {
				publish(r, "x", 0, 0)
				r.InvokeIf("a", 0, 0)
				r.Unknown("a", errTimeout)
			},
			final: Final{0: LogOf(0, "x", "a")},
			want:  []found{{RuleConditional, "a"}},
		},
		{
			name: "gap in the final log",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				publish(r, "c", 0, 2)
			},
			final: Final{0: {Entries: []Entry{{0, "a"}, {2, "c"}}}},
			want:  []found{{RuleContiguous, ""}},
		},
		{
			name: "offset repeated in the final log",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				r.Invoke("b", 0)
				r.Unknown("b", errTimeout)
			},
			final: Final{0: {Entries: []Entry{{0, "a"}, {0, "b"}}}},
			want:  []found{{RuleContiguous, "b"}},
		},
		{
			name: "final log starts below its first offset",
			build: func(r *Recorder) {
				publish(r, "a", 0, 1)
				publish(r, "b", 0, 2)
			},
			final: Final{0: {First: 2, Entries: []Entry{{1, "a"}, {2, "b"}}}},
			want:  []found{{RuleContiguous, "a"}},
		},
		{
			name:  "ack with no invoke",
			build: func(r *Recorder) { r.Ack("a", 0, 0) },
			final: Final{},
			want:  []found{{RuleHistory, "a"}},
		},
		{
			name: "two outcomes of one attempt",
			build: func(r *Recorder) {
				publish(r, "a", 0, 0)
				r.Fail("a", errRefused)
			},
			final: Final{0: LogOf(0, "a")},
			want:  []found{{RuleHistory, "a"}},
		},
		{
			name: "invoked again before an outcome",
			build: func(r *Recorder) {
				r.Invoke("a", 0)
				publish(r, "a", 0, 0)
			},
			final: Final{0: LogOf(0, "a")},
			want:  []found{{RuleHistory, "a"}},
		},
		{
			name:  "invoke with an empty id",
			build: func(r *Recorder) { r.Invoke("", 0) },
			final: Final{},
			want:  []found{{RuleHistory, ""}},
		},
		{
			name: "retry on another shard",
			build: func(r *Recorder) {
				r.Invoke("a", 0)
				r.Unknown("a", errTimeout)
				publish(r, "a", 1, 0)
			},
			final: Final{1: LogOf(0, "a")},
			// The record belongs to its first attempt's shard, so the ack
			// and the final log's copy are both on the wrong one.
			want: []found{{RuleAcked, "a"}, {RuleForeign, "a"}, {RuleHistory, "a"}},
		},
		{
			name:  "events out of order",
			build: func(r *Recorder) { publish(r, "a", 0, 0) },
			edit: func(h History) History {
				h[0].Seq, h[1].Seq = 5, 4
				return h
			},
			final: Final{0: LogOf(0, "a")},
			want:  []found{{RuleHistory, "a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			tt.build(r)
			h := r.History()
			if tt.edit != nil {
				h = tt.edit(h)
			}
			vs := Check(h, tt.final)
			if got := reduce(vs); !slices.Equal(got, reduce(wantViolations(tt.want))) {
				t.Errorf("Check found %v, want %v:%s", got, tt.want, messages(vs))
			}
			for _, v := range vs {
				if v.Message == "" || !strings.HasPrefix(v.String(), string(v.Rule)+": ") {
					t.Errorf("violation %+v is not described", v)
				}
			}
		})
	}
}

// wantViolations turns a table's expectations into violations, so that
// reduce sorts both sides alike.
func wantViolations(fs []found) []Violation {
	vs := make([]Violation, len(fs))
	for i, f := range fs {
		vs[i] = Violation{Rule: f.rule, ID: f.id}
	}
	return vs
}

// TestCheckMessages checks that a violation names what a person needs to
// find it: the record, the shard and offset, and the events' seqs.
func TestCheckMessages(t *testing.T) {
	r := New()
	publish(r, "a", 0, 0)
	publish(r, "b", 2, 1)
	r.Read(2, 0, []string{"x", "c"})
	final := Final{0: LogOf(0, "a"), 2: LogOf(0, "x")}
	vs := Check(r.History(), final)
	want := []string{
		`acked: record "b" acked at shard 2 offset 1 (seq 4) is in no final log; the final log holds nothing there (it spans offsets 0 to 0)`,
		`read: read of shard 2 from offset 0 (seq 5, 2 records) disagrees with the final log at 1 offsets; first at offset 1: the read returned "c", the final log holds nothing there (it spans offsets 0 to 0)`,
	}
	var got []string
	for _, v := range vs {
		if v.Rule != RuleForeign && v.Rule != RulePhantom {
			got = append(got, v.String())
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSummarize counts a history with every outcome, a loss, a duplicate
// and a trimmed ack.
func TestSummarize(t *testing.T) {
	r := New()
	publish(r, "a", 0, 0) // trimmed by retention
	publish(r, "b", 0, 1)
	publish(r, "lost", 0, 2)
	r.Invoke("f", 1)
	r.Fail("f", errRefused)
	r.Invoke("u", 1)
	r.Unknown("u", errTimeout)
	r.Invoke("u", 1) // retried, still unknown, written twice
	r.Unknown("u", errTimeout)
	r.Invoke("gone", 1)
	r.Unknown("gone", errTimeout)
	r.InvokeIf("w", 1, 2)
	r.Ack("w", 1, 2)
	r.InvokeIf("l", 1, 2)
	r.Fail("l", errRefused)
	r.Read(0, 1, []string{"b"})
	r.Read(1, 0, []string{"u", "u", "w"})
	final := Final{0: LogOf(1, "b"), 1: LogOf(0, "u", "u", "w")}

	got := Summarize(r.History(), final)
	want := Summary{
		Events: 20, Publishes: 8, Attempts: 9, Acked: 4, Failed: 2, Unknown: 2, UnknownPresent: 1,
		Conditional: 2, ConditionalWon: 1, Reads: 2, ReadRecords: 4, Records: 4, Lost: 1, Duplicated: 1, Trimmed: 1,
	}
	if got != want {
		t.Errorf("Summarize =\n%v\nwant\n%v", got, want)
	}
	if s := got.String(); !strings.Contains(s, "4 acked, 2 failed, 2 unknown (1 present)") || !strings.Contains(s, "1 lost, 1 duplicated, 1 trimmed") {
		t.Errorf("Summary.String() = %q", s)
	}
}

// TestCompareReplicas compares replicas' final logs: equal ones, ones that
// differ in a record, in length, in a shard one lacks, and ones whose
// retention ran apart.
func TestCompareReplicas(t *testing.T) {
	tests := []struct {
		name     string
		replicas map[string]Final
		want     []found
	}{
		{
			name:     "one replica",
			replicas: map[string]Final{"n1": {0: LogOf(0, "a")}},
		},
		{
			name: "equal",
			replicas: map[string]Final{
				"n1": {0: LogOf(0, "a", "b"), 1: LogOf(0, "c")},
				"n2": {0: LogOf(0, "a", "b"), 1: LogOf(0, "c")},
				"n3": {0: LogOf(0, "a", "b"), 1: LogOf(0, "c")},
			},
		},
		{
			name: "retention ran apart",
			replicas: map[string]Final{
				"n1": {0: LogOf(0, "a", "b", "c")},
				"n2": {0: LogOf(2, "c")},
			},
		},
		{
			name: "a record differs",
			replicas: map[string]Final{
				"n1": {0: LogOf(0, "a", "b")},
				"n2": {0: LogOf(0, "a", "x")},
				"n3": {0: LogOf(0, "a", "b")},
			},
			want: []found{{RuleReplicas, "b"}},
		},
		{
			name: "one is behind",
			replicas: map[string]Final{
				"n1": {0: LogOf(0, "a", "b")},
				"n2": {0: LogOf(0, "a")},
			},
			want: []found{{RuleReplicas, ""}},
		},
		{
			name: "one lacks a shard",
			replicas: map[string]Final{
				"n1": {0: LogOf(0, "a")},
				"n2": {0: LogOf(0, "a"), 1: LogOf(0, "c")},
			},
			want: []found{{RuleReplicas, ""}},
		},
		{
			name: "one has a gap",
			replicas: map[string]Final{
				"n1": {0: LogOf(0, "a", "b", "c")},
				"n2": {0: {Entries: []Entry{{0, "a"}, {2, "c"}}}},
			},
			want: []found{{RuleReplicas, "b"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := CompareReplicas(tt.replicas)
			if got := reduce(vs); !slices.Equal(got, reduce(wantViolations(tt.want))) {
				t.Errorf("CompareReplicas found %v, want %v:%s", got, tt.want, messages(vs))
			}
		})
	}
}
