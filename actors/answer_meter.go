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

// AnswerMeter counts the bytes of the frames waiting in a lane's mailbox
// (it is the lane's mailbox middleware) for the goroutine that reads the
// requests they answer, which calls Wait before reading each one. A frame
// counts from when it is posted until the lane has written it, so a lane
// blocked on QUIC flow control holds the reader back.
type AnswerMeter struct {
	limit   int64
	queued  atomic.Int64
	drained chan struct{} // a token when queued fell to the limit or below
	closed  chan struct{} // closed when the lane has stopped
	once    sync.Once
}

// ErrLaneStopped is Wait's error once the metered lane has stopped: what
// waits in its mailbox will never be written.
var ErrLaneStopped = errors.New("the lane has stopped")

// NewAnswerMeter returns a meter that holds readers back while more than
// limit bytes wait.
func NewAnswerMeter(limit int64) *AnswerMeter {
	return &AnswerMeter{limit: limit, drained: make(chan struct{}, 1), closed: make(chan struct{})}
}

// Wait returns once at most the limit waits, or with ctx's error, or with
// ErrLaneStopped.
func (m *AnswerMeter) Wait(ctx context.Context) error {
	for m.queued.Load() > m.limit {
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

func frameBytes(msg any) int64 {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	if f, ok := msg.(*WriteFrame); ok {
		return int64(len(f.Frame))
	}
	return 0
}

// MailboxStarted implements actor.MailboxMiddleware.
func (m *AnswerMeter) MailboxStarted() {}

// MessagePosted implements actor.MailboxMiddleware: it runs on the sender's
// goroutine as the frame is queued.
func (m *AnswerMeter) MessagePosted(msg any) {
	if n := frameBytes(msg); n > 0 {
		m.queued.Add(n)
	}
}

// MessageReceived implements actor.MailboxMiddleware: it runs after the
// lane has handled the frame.
func (m *AnswerMeter) MessageReceived(msg any) {
	if n := frameBytes(msg); n > 0 && m.queued.Add(-n) <= m.limit {
		select {
		case m.drained <- struct{}{}:
		default:
		}
	}
}

// MailboxEmpty implements actor.MailboxMiddleware.
func (m *AnswerMeter) MailboxEmpty() {}
