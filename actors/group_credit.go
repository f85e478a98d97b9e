package actors

import (
	"fmt"

	"github.com/heraldmq/herald/net/wire"
)

// memberCredit is a push member's credit window without the actor around
// it: the deliveries pushed to the member and not yet committed, and how
// many records the member may ask its coordinator for. It does no I/O; the
// member actor performs what its answers say.
//
// The window is the most records a member holds unsettled: pushed, and not
// yet committed durably. Each push is at most
//
//	budget = min(maxPerPush, window − inFlight)
//
// records, asked of the coordinator only while the budget is above zero,
// one request at a time. Credit comes back with a durable commit and with
// nothing else: an ack names a delivery by its cursor, and returns exactly
// that delivery's record count, once, when the coordinator says the commit
// is durable. A refused, failed or unanswered commit returns nothing (the
// delivery stays held, and its records are delivered again when their
// visibility timeout lapses); an ack whose count is not its delivery's, or
// of a cursor the member does not hold, returns nothing.
//
// The same records pushed again in one membership (their visibility
// timeout lapsed) carry the same cursor: the member holds each push as a
// copy, and the durable commit of the cursor returns every copy's credit,
// since it commits all their records.
//
// Invariant, at every moment (checkInvariant):
//
//	inFlight == Σ count × copies over held deliveries
//	inFlight + asked <= window
//
// so inFlight never exceeds the window, whatever the client sends.
type memberCredit struct {
	window, maxPerPush uint32
	// inFlight is the records of the held deliveries.
	inFlight uint32
	// asked is the budget of the claim request outstanding (0: none).
	asked uint32
	// held are the deliveries pushed and not committed, by cursor. The same
	// records pushed twice in one membership (redelivered after their
	// visibility timeout lapsed) carry the same cursor: each push is a copy,
	// acked (and credited) once each.
	held map[string]*heldDelivery
	// commits are the commits sent to the coordinator and not yet
	// answered, by their sequence number: the cursor and its held
	// deliveries as they were when the ack was sent.
	commits map[uint64]commitOf
	seq     uint64
}

// commitOf is what a commit outstanding acks.
type commitOf struct {
	key string
	d   *heldDelivery
}

// heldDelivery is one cursor's deliveries.
type heldDelivery struct {
	// count is the records the cursor names.
	count uint32
	// copies is how many times it was pushed and not committed; committing
	// how many of those have a commit outstanding.
	copies, committing int
}

func newMemberCredit(window, maxPerPush uint32) *memberCredit {
	if maxPerPush == 0 || maxPerPush > window {
		maxPerPush = window
	}
	return &memberCredit{window: window, maxPerPush: maxPerPush, held: map[string]*heldDelivery{}, commits: map[uint64]commitOf{}}
}

// budget is min(maxPerPush, window − inFlight − asked): what one more push
// may carry.
func (c *memberCredit) budget() uint32 {
	used := c.inFlight + c.asked
	if used >= c.window {
		return 0
	}
	return min(c.maxPerPush, c.window-used)
}

// ask returns how many records to ask the coordinator for, and records the
// request as outstanding; 0 means ask nothing (a request is out, or the
// budget is zero).
func (c *memberCredit) ask() uint32 {
	if c.asked > 0 {
		return 0
	}
	c.asked = c.budget()
	return c.asked
}

// granted takes a push of n records named by cursor, the answer to the
// request outstanding. A push the member did not ask for, or larger than
// it asked, breaks the window: it is refused with an error (the member
// ends) and changes nothing.
func (c *memberCredit) granted(cursor []byte, n uint32) error {
	switch {
	case c.asked == 0:
		return fmt.Errorf("group member: a push of %d records it did not ask for", n)
	case n == 0 || n > c.asked:
		return fmt.Errorf("group member: a push of %d records, asked for 1-%d", n, c.asked)
	case len(cursor) == 0:
		return fmt.Errorf("group member: a push of %d records without a cursor", n)
	}
	c.asked = 0
	d := c.held[string(cursor)]
	if d == nil {
		d = &heldDelivery{count: n}
		c.held[string(cursor)] = d
	} else if d.count != n {
		return fmt.Errorf("group member: cursor pushed with %d records, held with %d", n, d.count)
	}
	d.copies++
	c.inFlight += n
	return nil
}

// ackKind is what the member does with an ack.
type ackKind int

const (
	// ackRefused: answer the ack with its error; nothing is sent.
	ackRefused ackKind = iota
	// ackHeartbeat: an empty ack; send the coordinator a heartbeat, which
	// returns no credit.
	ackHeartbeat
	// ackCommit: send the coordinator the commit numbered seq; its answer
	// goes to committed.
	ackCommit
	// ackVerify: a cursor the member does not hold; the coordinator says
	// what it is (forged, of another membership, or acked already). It
	// returns no credit, whatever the answer.
	ackVerify
)

// ackDecision is what ack decided.
type ackDecision struct {
	kind ackKind
	err  *wire.Error
	seq  uint64
}

// ack decides what an ack of count records named by cursor does.
func (c *memberCredit) ack(cursor []byte, count uint32) ackDecision {
	if len(cursor) == 0 {
		if count > 0 {
			return ackDecision{kind: ackRefused, err: wire.Errorf(wire.CodeInvalidRequest,
				"an ack returning %d credit needs the cursor of the records it commits", count)}
		}
		return ackDecision{kind: ackHeartbeat}
	}
	d := c.held[string(cursor)]
	if d == nil {
		return ackDecision{kind: ackVerify}
	}
	if count != d.count {
		return ackDecision{kind: ackRefused, err: wire.Errorf(wire.CodeInvalidRequest,
			"the cursor names %d records and the ack says %d: an ack returns the credit of exactly its delivery", d.count, count)}
	}
	if d.committing >= d.copies {
		return ackDecision{kind: ackRefused, err: wire.Errorf(wire.CodeInvalidRequest,
			"this delivery's ack is being committed already; wait for its answer")}
	}
	d.committing++
	c.seq++
	c.commits[c.seq] = commitOf{key: string(cursor), d: d}
	return ackDecision{kind: ackCommit, seq: c.seq}
}

// committed takes the coordinator's answer to commit seq: durable (ok)
// returns the credit of every copy of the delivery (its records are
// committed, however many times they were pushed), anything else returns
// none and leaves the delivery held, to be acked again. It returns the
// credit returned.
func (c *memberCredit) committed(seq uint64, ok bool) uint32 {
	cm, found := c.commits[seq]
	if !found {
		return 0
	}
	delete(c.commits, seq)
	d := cm.d
	if c.held[cm.key] != d {
		return 0 // another ack of the cursor was committed first
	}
	d.committing--
	if !ok {
		return 0
	}
	delete(c.held, cm.key)
	credit := d.count * uint32(d.copies)
	c.inFlight -= credit
	return credit
}

// stalled reports whether the window is full and no commit is out: no
// push can come until the client acks, and none of its acks is on its way.
// Told that its last claims lapsed, such a member holds a whole window of
// records the group hands out again, and would hold its shards for good.
func (c *memberCredit) stalled() bool {
	if c.inFlight < c.window {
		return false
	}
	for _, cm := range c.commits {
		if c.held[cm.key] == cm.d {
			return false
		}
	}
	return true
}

// checkInvariant returns an error if the invariant does not hold (tests).
func (c *memberCredit) checkInvariant() error {
	var sum uint64
	for k, d := range c.held {
		if d.copies <= 0 || d.committing < 0 || d.committing > d.copies || d.count == 0 {
			return fmt.Errorf("held %x: count %d copies %d committing %d", k, d.count, d.copies, d.committing)
		}
		sum += uint64(d.count) * uint64(d.copies)
	}
	if sum != uint64(c.inFlight) {
		return fmt.Errorf("in flight %d, held deliveries sum to %d", c.inFlight, sum)
	}
	if uint64(c.inFlight)+uint64(c.asked) > uint64(c.window) {
		return fmt.Errorf("in flight %d + asked %d exceeds the window %d", c.inFlight, c.asked, c.window)
	}
	committing := 0
	for _, d := range c.held {
		committing += d.committing
	}
	live := 0
	for _, cm := range c.commits {
		if c.held[cm.key] == cm.d {
			live++
		}
	}
	if committing != live {
		return fmt.Errorf("%d commits outstanding of held deliveries, held deliveries count %d", live, committing)
	}
	return nil
}
