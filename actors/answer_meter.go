package actors

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// answerBacklogBytes is how many bytes of answers may wait for a lane to
// write them before the goroutine reading the requests they answer stops
// reading: a client that sends requests and never reads the answers holds
// about this much of the node's memory, not one answer per request.
const answerBacklogBytes = 4 << 20

// maxDispatched is how many requests one connection may have at group
// coordinators (polls waiting for work included) before its control loop
// stops reading: their answers are not in the lane's mailbox yet, so the
// byte bound cannot see them.
const maxDispatched = 256

// AnswerMeter counts the bytes of the frames waiting in a lane's mailbox
// (it is the lane's mailbox middleware) for the goroutine that reads the
// requests they answer, which calls Wait before reading each one. A frame
// counts from when it is posted until the lane has written it, so a lane
// blocked on QUIC flow control holds the reader back.
type AnswerMeter struct {
	limit      int64
	queued     atomic.Int64
	dispatched atomic.Int64
	drained    chan struct{} // a token whenever an answer was handled
	closed     chan struct{} // closed when the lane has stopped
	once       sync.Once
}

// ErrLaneStopped is Wait's error once the metered lane has stopped: what
// waits in its mailbox will never be written.
var ErrLaneStopped = errors.New("the lane has stopped")

// NewAnswerMeter returns a meter that holds readers back while more than
// limit bytes wait.
func NewAnswerMeter(limit int64) *AnswerMeter {
	return &AnswerMeter{limit: limit, drained: make(chan struct{}, 1), closed: make(chan struct{})}
}

// Dispatch counts a request handed to another actor, whose answer (a
// WriteFrame marked Dispatched) will come to the lane later.
func (m *AnswerMeter) Dispatch() { m.dispatched.Add(1) }

// Wait returns once at most the limit waits and fewer than maxDispatched
// requests are out, or with ctx's error, or with ErrLaneStopped.
func (m *AnswerMeter) Wait(ctx context.Context) error {
	for m.queued.Load() > m.limit || m.dispatched.Load() >= maxDispatched {
		select {
		case <-m.drained:
		case <-m.closed:
			return ErrLaneStopped
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// laneStopped releases the waiters for good.
func (m *AnswerMeter) laneStopped() { m.once.Do(func() { close(m.closed) }) }

// Queued returns the bytes waiting.
func (m *AnswerMeter) Queued() int64 { return m.queued.Load() }

// meteredFrame returns msg's frame if the meter counts it.
func meteredFrame(msg any) *WriteFrame {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	if f, ok := msg.(*WriteFrame); ok && !f.Push {
		return f
	}
	return nil
}

// MailboxStarted implements actor.MailboxMiddleware.
func (m *AnswerMeter) MailboxStarted() {}

// MessagePosted implements actor.MailboxMiddleware: it runs on the sender's
// goroutine as the frame is queued.
func (m *AnswerMeter) MessagePosted(msg any) {
	if f := meteredFrame(msg); f != nil {
		m.queued.Add(int64(len(f.Frame)))
	}
}

// MessageReceived implements actor.MailboxMiddleware: it runs after the
// lane has handled the frame.
func (m *AnswerMeter) MessageReceived(msg any) {
	f := meteredFrame(msg)
	if f == nil {
		return
	}
	m.queued.Add(-int64(len(f.Frame)))
	if f.Dispatched {
		m.dispatched.Add(-1)
	}
	select { // Wait checks again
	case m.drained <- struct{}{}:
	default:
	}
}

// MailboxEmpty implements actor.MailboxMiddleware.
func (m *AnswerMeter) MailboxEmpty() {}
