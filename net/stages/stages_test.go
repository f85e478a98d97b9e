package stages

import (
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"
)

// payload is a record payload whose first eight bytes are key.
func payload(key uint64, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b, key)
	return b
}

// A record marked at every stage yields the time between consecutive
// stages and the whole path; one that missed a stage is left out.
func TestRecorderSteps(t *testing.T) {
	var now time.Time
	r := &Recorder{Now: func() time.Time { return now }}
	r.Reset(16, false)
	base := time.Unix(1000, 0)
	for key := uint64(1); key <= 10; key++ {
		now = base
		for s := Publish; s < numStages; s++ {
			now = now.Add(time.Duration(s+1) * time.Microsecond) // stage s is reached s+1 µs after s-1
			p := payload(key, 16)
			switch s {
			case Publish, Next:
				r.Mark(s, p)
			default:
				r.MarkRecords(s, append([]byte("record header"), p...)) // a block ends with the payload
			}
		}
	}
	r.Mark(Publish, payload(99, 16)) // reaches no other stage
	rep := r.Report()
	if rep.Records != 11 || rep.Complete != 10 || len(rep.Steps) != int(numStages) {
		t.Fatalf("report %+v", rep)
	}
	for i, st := range rep.Steps[:numStages-1] {
		want := time.Duration(i+2) * time.Microsecond
		if st.From != Stage(i) || st.To != Stage(i+1) || st.P10 != want || st.P50 != want || st.P99 != want {
			t.Errorf("step %d: %+v, want %v", i, st, want)
		}
	}
	whole := rep.Steps[numStages-1]
	if whole.From != Publish || whole.To != Next || whole.P50 != 44*time.Microsecond { // 2+3+...+9
		t.Errorf("whole path: %+v", whole)
	}
	if out := rep.String(); !strings.Contains(out, "10 at every stage") || !strings.Contains(out, "Next returns it") {
		t.Errorf("report text:\n%s", out)
	}
}

// Without Last a stage keeps a record's first mark; with it the delivery
// stages keep the last (the last of a fan-out's deliveries), the publish
// stages still the first.
func TestRecorderLast(t *testing.T) {
	for _, last := range []bool{false, true} {
		var now time.Time
		r := &Recorder{Now: func() time.Time { return now }}
		r.Reset(8, last)
		p := payload(7, 8)
		at := func(s Stage, us int) {
			now = time.Unix(1000, 0).Add(time.Duration(us) * time.Microsecond)
			r.Mark(s, p)
		}
		for s := Publish; s < numStages; s++ {
			at(s, 10*int(s))
		}
		at(NodeRead, 500) // a publish stage marked again
		at(Next, 900)     // a second delivery
		rep := r.Report()
		whole := rep.Steps[len(rep.Steps)-1].P50
		nodeRead := rep.Steps[NodeRead-1].P50
		if want := map[bool]time.Duration{false: 80 * time.Microsecond, true: 900 * time.Microsecond}[last]; whole != want || nodeRead != 10*time.Microsecond || rep.Last != last {
			t.Errorf("last=%v: whole path %v (want %v), to NodeRead %v (want 10µs)", last, whole, want, nodeRead)
		}
	}
}

// Short payloads, blocks shorter than the payload, no payload size, and
// Reset: nothing is marked.
func TestRecorderIgnores(t *testing.T) {
	r := &Recorder{}
	r.Mark(Publish, []byte{1, 2, 3})
	r.MarkRecords(Shard, payload(1, 64)) // PayloadBytes 0
	r.Reset(128, false)
	r.MarkRecords(Shard, payload(1, 64)) // shorter than a payload
	r.Mark(Stage(-1), payload(2, 8))
	r.Mark(numStages, payload(3, 8))
	if rep := r.Report(); rep.Records != 0 || len(rep.Steps) != 0 {
		t.Errorf("report %+v", rep)
	}
	r.Mark(Publish, payload(4, 8))
	r.Reset(128, false)
	if rep := r.Report(); rep.Records != 0 {
		t.Errorf("Reset kept %d records", rep.Records)
	}
}

// Marks from many goroutines, with a Reset among them (run with -race).
func TestRecorderConcurrent(t *testing.T) {
	r := &Recorder{}
	r.Reset(8, true)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				p := payload(uint64(g*1000+i), 8)
				for s := Publish; s < numStages; s++ {
					r.MarkRecords(s, p)
				}
				if g == 0 && i == 100 {
					r.Reset(8, true)
				}
			}
		})
	}
	wg.Wait()
	if rep := r.Report(); rep.Complete == 0 || rep.Complete > rep.Records {
		t.Errorf("report %+v", rep)
	}
}
