package client

import (
	"errors"
	"slices"
)

// What a publish-stream actor does with its frames when the connection is
// lost, or the node refuses a frame because it is draining, decided here
// with no I/O (the actor applies it):
//
//   - a frame not written yet stays queued and goes out on the next
//     connection, in order;
//   - a frame written and not answered is in doubt: the node may have
//     applied it. An idempotent publish's frame (a Producer's) is written
//     again on the next connection, where the node's dedup answers it with
//     the original offsets if it had landed; any other fails with an error
//     matching ErrOutcomeUnknown;
//   - a frame the node refused with shutting_down was not applied: it goes
//     out again on the next connection, whatever its kind;
//   - the not yet written frames of a publish that already failed in doubt
//     (an AckPerMessage publish of several frames) are not sent: the
//     publish has failed, and sending the rest would write records the
//     caller was told may be lost.
//
// Frames put back go before the frames never written, in the order they
// were first written (by request id), so a shard's publishes keep their
// order across the reconnect.

// frameFate is what becomes of one frame when its connection is lost.
type frameFate int

const (
	// fateKeep: not written; it stays queued.
	fateKeep frameFate = iota
	// fateResend: written, unanswered, idempotent: write it again.
	fateResend
	// fateUnknown: written, unanswered: it fails with its outcome unknown.
	fateUnknown
)

// fateOnLoss decides the fate of a frame when its connection is lost:
// written says it went out on that connection and is unanswered, resend
// that its publish is idempotent.
func fateOnLoss(written, resend bool) frameFate {
	switch {
	case !written:
		return fateKeep
	case resend:
		return fateResend
	default:
		return fateUnknown
	}
}

// lossPlan is what a publish-stream actor does when its connection is lost:
// the new queue (resent frames first), the frames that fail in doubt, and
// the queued frames dropped because their publish failed in doubt.
type lossPlan struct {
	queue   []pendingFrame
	unknown []pendingFrame
	dropped []pendingFrame
}

// planLoss decides, for the frames written and unanswered (inflight) and
// the frames queued, what a lost connection does to each (see above).
// Queued frames may include frames put back earlier (their id is set).
func planLoss(inflight []pendingFrame, queue []pendingFrame) lossPlan {
	var p lossPlan
	var back []pendingFrame
	doubtful := map[*publishRequest]bool{}
	for _, f := range inflight {
		switch fateOnLoss(true, f.req.resend) {
		case fateResend:
			back = append(back, f)
		default:
			p.unknown = append(p.unknown, f)
			doubtful[f.req] = true
		}
	}
	kept := make([]pendingFrame, 0, len(queue))
	for _, f := range queue {
		if doubtful[f.req] || errors.Is(f.req.err, ErrOutcomeUnknown) {
			p.dropped = append(p.dropped, f)
			continue
		}
		kept = append(kept, f)
	}
	p.queue = requeue(kept, back)
	return p
}

// requeue puts the written frames back into queue: before every frame
// never written, merged by the request id each was written with with the
// frames put back before.
func requeue(queue, back []pendingFrame) []pendingFrame {
	if len(back) == 0 {
		return queue
	}
	n := 0 // queue[:n] are frames put back earlier
	for n < len(queue) && queue[n].id != 0 {
		n++
	}
	front := append(slices.Clone(queue[:n]), back...)
	slices.SortStableFunc(front, func(a, b pendingFrame) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	return append(front, queue[n:]...)
}
