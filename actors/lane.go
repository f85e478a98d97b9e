package actors

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/stages"
	"github.com/heraldmq/herald/net/wire"
)

// LaneConfig configures a writer lane.
type LaneConfig struct {
	// Dispatcher runs the lane's mailbox (nil: protoactor's default; the
	// node's is Goroutines.Dispatcher).
	Dispatcher actor.Dispatcher
	// W is the QUIC stream's send side. The lane is its only writer.
	W io.WriteCloser
	// Window, if set, is the publish window of a publish stream: the lane
	// frees one slot for every publish it answers (AckNone ones included).
	Window chan struct{}
	// Meter, if set, counts the frames waiting for the lane (the control
	// stream's answers, a group push stream's): the reader of the requests
	// they answer waits on it.
	Meter *AnswerMeter
	// MaxEvents and MaxBytes bound one EventBatch frame (defaults 64 and
	// 64 KiB); a single section larger than MaxBytes goes alone.
	MaxEvents int
	MaxBytes  int
	// EventReqID is the request id EventBatch frames carry (the Subscribe's).
	EventReqID uint64
	// BufferSize is the bufio size (default 64 KiB).
	BufferSize int
	// MaxDelay is event_batch_max_delay_us: under load (the last write
	// filled a frame) a frame that is not full yet waits up to this long,
	// from its first section's arrival, for more. 0 turns it off. A trickle
	// is never delayed.
	MaxDelay time.Duration
	// Now and AfterFunc are the lane's clock and timer (tests inject them);
	// nil means time.Now and time.AfterFunc.
	Now       func() time.Time
	AfterFunc func(time.Duration, func()) (stop func() bool)
}

// lane owns the send side of one QUIC stream. It is one of the two actor
// kinds allowed to block in Receive (on the stream write); what it is sent is
// bounded upstream (credit for sections, the publish window for acks).
// Writes go through a buffer that is flushed when the lane's mailbox has
// been drained: a flushLane marker queued behind the messages that arrived.
type lane struct {
	cfg LaneConfig
	w   *bufio.Writer
	// secs are sections gathered for the next EventBatch frames.
	secs []*wire.Section
	// secBytes sums secs' records bytes.
	secBytes int64
	// flushQueued is true while a flushLane marker is in the mailbox.
	flushQueued bool
	// dead is set after a write failed or the lane was closed.
	dead bool
	// loaded is set when the last write of sections filled a frame: the
	// lane is under load, and a frame that is not full may wait MaxDelay.
	loaded bool
	// firstAt is when the oldest gathered section arrived.
	firstAt time.Time
	// stopDelay cancels the pending delay timer (nil: none); delaySeq names
	// it, so a stale timer's message is ignored.
	stopDelay func() bool
	delaySeq  uint64
	// scratch is reused to encode small frames.
	scratch []byte
}

// defaultLaneBuffer is a lane's write buffer unless configured.
const defaultLaneBuffer = 64 << 10

// NewLaneProps returns the props of a writer lane.
func NewLaneProps(cfg LaneConfig) *actor.Props {
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = 64
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 64 << 10
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = defaultLaneBuffer
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	producer := func() actor.Actor { return &lane{cfg: cfg} }
	if cfg.Meter != nil {
		return actor.PropsFromProducer(producer, actor.WithMailbox(actor.Unbounded(cfg.Meter)), actor.WithDispatcher(cfg.Dispatcher))
	}
	return actor.PropsFromProducer(producer, actor.WithDispatcher(cfg.Dispatcher))
}

// Receive dispatches.
func (l *lane) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// Nothing to do: the writer is taken on the first write.
	case *WriteFrame:
		l.onFrame(ctx, m.Frame)
	case *PublishAcked:
		l.onPublishAcked(ctx, m)
	case *PublishRejected:
		l.onPublishRejected(ctx, m)
	case *WriteSections:
		l.onSections(ctx, m)
	case *flushLane:
		l.onFlushLane(ctx)
	case *delayElapsed:
		l.onDelayElapsed(ctx, m)
	case *CloseLane:
		l.onClose(ctx, m)
	case *LaneSyncRequest:
		l.onSync(ctx)
	case *actor.Stopping:
		l.onStopping()
	case *actor.Stopped:
		l.onStopped()
	case *actor.Restarting:
		// Never: a lane's parent stops it when it fails.
	default:
		ctx.Logger().Warn("lane: unknown message", slog.String("type", fmt.Sprintf("%T", m)))
	}
}

// release frees one publish window slot.
func (l *lane) release() {
	if l.cfg.Window == nil {
		return
	}
	select {
	case <-l.cfg.Window:
	default:
	}
}

// onPublishAcked writes a publish's ack (unless it asked for none) and
// frees its window slot.
func (l *lane) onPublishAcked(ctx actor.Context, m *PublishAcked) {
	if m.Ack != wire.AckNone {
		l.scratch = wire.AppendPublishAck(l.scratch[:0], m.ReqID, wire.PublishAck{Shard: m.Shard, Offset: m.Offset, Count: m.Count, Duplicate: m.Duplicate})
		l.onFrame(ctx, l.scratch)
	}
	l.release()
}

// onPublishRejected writes a publish's error and frees its window slot.
func (l *lane) onPublishRejected(ctx actor.Context, m *PublishRejected) {
	l.scratch = wire.AppendError(l.scratch[:0], m.ReqID, m.Err)
	l.onFrame(ctx, l.scratch)
	l.release()
}

// onFlushLane runs when the mailbox has been drained: it writes what was
// gathered, unless the lane waits for more (holdForMore).
func (l *lane) onFlushLane(ctx actor.Context) {
	l.flushQueued = false
	if l.holdForMore(ctx) {
		return
	}
	l.flush(ctx)
}

// onDelayElapsed writes what waited for more sections once MaxDelay is
// over.
func (l *lane) onDelayElapsed(ctx actor.Context, m *delayElapsed) {
	if m.seq != l.delaySeq || l.stopDelay == nil {
		return // a timer that was stopped or superseded
	}
	l.stopDelay = nil
	l.flush(ctx)
}

// onSync writes everything the lane holds, then answers.
func (l *lane) onSync(ctx actor.Context) {
	l.flush(ctx)
	ctx.Respond(&LaneSyncResponse{})
}

// onStopping stops the delay timer.
func (l *lane) onStopping() {
	if l.stopDelay != nil {
		l.stopDelay()
	}
}

// onStopped releases the answer meter's waiters for good: the lane writes
// nothing more.
func (l *lane) onStopped() {
	if l.cfg.Meter != nil {
		l.cfg.Meter.laneStopped()
	}
}

func (l *lane) scheduleFlush(ctx actor.Context) {
	if !l.flushQueued {
		l.flushQueued = true
		ctx.Send(ctx.Self(), &flushLane{})
	}
}

func (l *lane) onFrame(ctx actor.Context, frame []byte) {
	if l.dead {
		return
	}
	// Sections gathered before this frame go first, to keep the order.
	l.writeSections(ctx)
	if _, err := l.writer().Write(frame); err != nil {
		l.fail(ctx, err)
		return
	}
	l.scheduleFlush(ctx)
}

func (l *lane) onSections(ctx actor.Context, m *WriteSections) {
	if l.dead {
		return
	}
	if len(l.secs) == 0 {
		l.firstAt = l.cfg.Now()
	}
	for _, s := range m.Sections {
		l.secs = append(l.secs, s)
		l.secBytes += int64(len(s.Records))
	}
	l.scheduleFlush(ctx)
}

// holdForMore decides, when the mailbox has been drained, whether to wait
// for more sections instead of writing now: only under load, only while the
// frame is not full, and at most MaxDelay after its first section arrived.
// A trickle (the last write did not fill a frame) goes out at once.
func (l *lane) holdForMore(ctx actor.Context) bool {
	if l.cfg.MaxDelay <= 0 || !l.loaded || len(l.secs) == 0 || l.dead ||
		len(l.secs) >= l.cfg.MaxEvents || l.secBytes >= int64(l.cfg.MaxBytes) {
		return false
	}
	wait := l.firstAt.Add(l.cfg.MaxDelay).Sub(l.cfg.Now())
	if wait <= 0 {
		return false
	}
	if l.stopDelay == nil {
		l.delaySeq++
		self, root, seq := ctx.Self(), ctx.ActorSystem().Root, l.delaySeq
		l.stopDelay = l.cfg.AfterFunc(wait, func() { root.Send(self, &delayElapsed{seq: seq}) })
	}
	return true
}

// writeSections writes the gathered sections as EventBatch frames of at most
// MaxEvents sections and about MaxBytes each, then reports them written.
func (l *lane) writeSections(ctx actor.Context) {
	if len(l.secs) == 0 || l.dead {
		return
	}
	if stages.Enabled {
		stages.MarkRecords(stages.LaneWrite, l.secs[len(l.secs)-1].Records)
	}
	entries, bytes := len(l.secs), l.secBytes
	l.loaded = entries >= l.cfg.MaxEvents || bytes >= int64(l.cfg.MaxBytes)
	if l.stopDelay != nil {
		l.stopDelay()
		l.stopDelay = nil
	}
	for start := 0; start < len(l.secs); {
		end, size := start, 0
		for end < len(l.secs) && end-start < l.cfg.MaxEvents && (end == start || size+l.secs[end].Size() <= l.cfg.MaxBytes) {
			size += l.secs[end].Size()
			end++
		}
		if err := wire.WriteEventBatch(l.writer(), l.cfg.EventReqID, l.secs[start:end]); err != nil {
			l.fail(ctx, err)
			return
		}
		start = end
	}
	clear(l.secs)
	l.secs = l.secs[:0]
	l.secBytes = 0
	if err := l.w.Flush(); err != nil {
		l.fail(ctx, err)
		return
	}
	ctx.Send(ctx.Parent(), &SectionsWritten{Entries: entries, Bytes: bytes})
}

func (l *lane) flush(ctx actor.Context) {
	if l.dead {
		return
	}
	l.writeSections(ctx)
	if l.dead || l.w == nil {
		return
	}
	if err := l.w.Flush(); err != nil {
		l.fail(ctx, err)
		return
	}
	l.releaseWriter()
}

// laneWriters pools the default-sized write buffers: a lane holds one only
// while it has something to write, so an idle subscription costs no buffer.
var laneWriters sync.Pool

// writer returns the lane's buffered writer, taking one when it has none.
func (l *lane) writer() *bufio.Writer {
	if l.w == nil {
		if w, ok := laneWriters.Get().(*bufio.Writer); ok && l.cfg.BufferSize == defaultLaneBuffer {
			w.Reset(l.cfg.W)
			l.w = w
		} else {
			l.w = bufio.NewWriterSize(l.cfg.W, l.cfg.BufferSize)
		}
	}
	return l.w
}

// releaseWriter gives an emptied writer back to the pool.
func (l *lane) releaseWriter() {
	if l.w == nil || l.w.Buffered() > 0 {
		return
	}
	if l.cfg.BufferSize == defaultLaneBuffer {
		l.w.Reset(nil)
		laneWriters.Put(l.w)
	}
	l.w = nil
}

func (l *lane) onClose(ctx actor.Context, m *CloseLane) {
	if l.dead {
		return
	}
	l.flush(ctx)
	if m.Err != nil && !l.dead {
		l.scratch = wire.AppendError(l.scratch[:0], m.ReqID, m.Err)
		if _, err := l.writer().Write(l.scratch); err == nil {
			_ = l.w.Flush()
		}
	}
	l.dead = true
	l.releaseWriter()
	_ = l.cfg.W.Close()
}

func (l *lane) fail(ctx actor.Context, err error) {
	l.dead = true
	l.secs = nil
	ctx.Send(ctx.Parent(), &LaneFailed{Lane: ctx.Self(), Err: err})
}
