package client

import (
	"fmt"
	"strings"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

func TestFateOnLoss(t *testing.T) {
	tests := []struct {
		written, resend bool
		want            frameFate
	}{
		{false, false, fateKeep},
		{false, true, fateKeep},
		{true, true, fateResend},
		{true, false, fateUnknown},
	}
	for _, tc := range tests {
		if got := fateOnLoss(tc.written, tc.resend); got != tc.want {
			t.Errorf("fateOnLoss(written %v, resend %v) = %d, want %d", tc.written, tc.resend, got, tc.want)
		}
	}
}

// TestPlanLoss: what a lost connection does to a publish stream's frames.
// Frames are named by their request's name and frame index ("p1.0"), with
// the id they were written with ("@7") when they have one.
func TestPlanLoss(t *testing.T) {
	reqs := map[string]*publishRequest{}
	req := func(name string, mode wire.AckMode, resend bool, frames int) *publishRequest {
		r := &publishRequest{mode: mode, resend: resend, frames: make([][]byte, frames)}
		reqs[name] = r
		return r
	}
	name := func(f pendingFrame) string {
		for n, r := range reqs {
			if r == f.req {
				if f.id != 0 {
					return fmt.Sprintf("%s.%d@%d", n, f.idx, f.id)
				}
				return fmt.Sprintf("%s.%d", n, f.idx)
			}
		}
		return "?"
	}
	names := func(fs []pendingFrame) string {
		out := make([]string, len(fs))
		for i, f := range fs {
			out[i] = name(f)
		}
		return strings.Join(out, " ")
	}

	tests := []struct {
		name    string
		build   func() (inflight, queue []pendingFrame)
		queue   string
		unknown string
		dropped string
	}{
		{
			name: "idempotent resent first in id order, plain in doubt, queued kept",
			build: func() ([]pendingFrame, []pendingFrame) {
				i1 := req("i1", wire.AckPerBatch, true, 1)
				p2 := req("p2", wire.AckPerBatch, false, 1)
				i3 := req("i3", wire.AckPerBatch, true, 1)
				q4 := req("q4", wire.AckPerBatch, false, 1)
				qi5 := req("qi5", wire.AckPerBatch, true, 1)
				return []pendingFrame{{req: i3, id: 12}, {req: p2, id: 11}, {req: i1, id: 10}},
					[]pendingFrame{{req: q4}, {req: qi5}}
			},
			queue: "i1.0@10 i3.0@12 q4.0 qi5.0", unknown: "p2.0@11",
		},
		{
			name: "the rest of a per-message publish in doubt is not sent",
			build: func() ([]pendingFrame, []pendingFrame) {
				m := req("m", wire.AckPerMessage, false, 3)
				other := req("o", wire.AckPerBatch, false, 1)
				return []pendingFrame{{req: m, idx: 0, id: 5}},
					[]pendingFrame{{req: m, idx: 1}, {req: other}, {req: m, idx: 2}}
			},
			queue: "o.0", unknown: "m.0@5", dropped: "m.1 m.2",
		},
		{
			name: "a publish already in doubt from an earlier loss is not sent either",
			build: func() ([]pendingFrame, []pendingFrame) {
				m := req("m", wire.AckPerMessage, false, 2)
				m.err = outcomeUnknown(fmt.Errorf("earlier loss"))
				return nil, []pendingFrame{{req: m, idx: 1}}
			},
			dropped: "m.1",
		},
		{
			name: "frames put back earlier merge by id before the never written",
			build: func() ([]pendingFrame, []pendingFrame) {
				a := req("a", wire.AckPerBatch, false, 1) // refused with shutting_down earlier, put back
				b := req("b", wire.AckPerBatch, true, 1)
				c := req("c", wire.AckPerBatch, false, 1)
				d := req("d", wire.AckPerBatch, true, 1)
				return []pendingFrame{{req: d, id: 9}, {req: b, id: 3}},
					[]pendingFrame{{req: a, id: 7}, {req: c}}
			},
			queue: "b.0@3 a.0@7 d.0@9 c.0",
		},
		{
			name: "nothing in flight: the queue is kept as is",
			build: func() ([]pendingFrame, []pendingFrame) {
				a := req("a", wire.AckNone, false, 1)
				b := req("b", wire.AckPerBatch, false, 1)
				return nil, []pendingFrame{{req: a}, {req: b}}
			},
			queue: "a.0 b.0",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clear(reqs)
			inflight, queue := tc.build()
			p := planLoss(inflight, queue)
			if got := names(p.queue); got != tc.queue {
				t.Errorf("queue %q, want %q", got, tc.queue)
			}
			if got := names(p.unknown); got != tc.unknown {
				t.Errorf("in doubt %q, want %q", got, tc.unknown)
			}
			if got := names(p.dropped); got != tc.dropped {
				t.Errorf("dropped %q, want %q", got, tc.dropped)
			}
			if n := len(p.queue) + len(p.unknown) + len(p.dropped); n != len(inflight)+len(queue) {
				t.Errorf("%d frames planned, %d given", n, len(inflight)+len(queue))
			}
		})
	}
}
