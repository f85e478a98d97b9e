package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// Defaults of the connection's timeouts.
const (
	// DefaultDialTimeout bounds one dial of one address: the QUIC handshake
	// and Hello/Welcome (WithDialTimeout).
	DefaultDialTimeout = 2 * time.Second
	// DefaultIdleTimeout bounds how long a node that stopped answering
	// under a live connection goes unnoticed (WithIdleTimeout).
	DefaultIdleTimeout = 5 * time.Second
	// minIdleTimeout is the shortest WithIdleTimeout.
	minIdleTimeout = time.Second
)

// ErrNoNodeAnswered matches the error of a dial that got no answer at an
// address within the dial timeout: no node listens there, or its packets do
// not get through. (QUIC runs over UDP, which has no "connection refused":
// the handshake times out.)
var ErrNoNodeAnswered = errors.New("herald: no node answered")

// noAnswerError is the cause of a dial that got no answer.
type noAnswerError struct {
	timeout time.Duration
	err     error
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("no node answered within %v (the QUIC handshake timed out: is a node listening there?)", e.timeout)
}

// Is matches ErrNoNodeAnswered.
func (e *noAnswerError) Is(target error) bool { return target == ErrNoNodeAnswered }

// Unwrap returns quic-go's error, if any.
func (e *noAnswerError) Unwrap() error { return e.err }

// DialError is the failure to connect to one address: Err is why (it
// matches ErrNoNodeAnswered when nothing answered; a node's refusal of the
// Hello is its *Error). Dial to several addresses joins one DialError per
// address tried (errors.Join).
type DialError struct {
	// Addr is the address dialed.
	Addr string
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *DialError) Error() string { return "herald: dial " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *DialError) Unwrap() error { return e.Err }

// ReconnectError is what every call fails with once the client gave up
// reconnecting: Cause is why the connection was lost, Last the last
// attempt's error. It unwraps to both.
type ReconnectError struct {
	// Attempts is how many attempts failed.
	Attempts int
	// Elapsed is how long the client tried.
	Elapsed time.Duration
	// Cause is what ended the connection.
	Cause error
	// Last is the error of the last attempt (nil if none was made).
	Last error
}

// Error implements error.
func (e *ReconnectError) Error() string {
	msg := fmt.Sprintf("herald: connection lost (%v) and not restored after %d attempts in %v", e.Cause, e.Attempts, e.Elapsed.Round(time.Millisecond))
	if e.Last != nil {
		msg += ": " + e.Last.Error()
	}
	return msg
}

// Unwrap returns Cause and Last.
func (e *ReconnectError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Cause}
	}
	return []error{e.Cause, e.Last}
}

// splitSeeds returns the addresses of a Dial's addr ("a:7400,b:7400")
// followed by the WithSeeds ones, each once, in order.
func splitSeeds(addr string, more []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, list := range append([]string{addr}, more...) {
		for _, a := range strings.Split(list, ",") {
			a = strings.TrimSpace(a)
			if a != "" && !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// dialer connects to nodes with the client's options: one address at a
// time, each within the dial timeout.
type dialer struct {
	o     *options
	qconf *quic.Config
	// seeds are the addresses, in the order they are tried.
	seeds []string
}

func newDialer(o *options, seeds []string) *dialer {
	// A subscription the application stops reading pauses its own QUIC
	// stream: each stream may hold at most streamReceiveWindow unread, and
	// the connection's window is far larger than that, so paused
	// subscriptions (up to about connectionReceiveWindow/streamReceiveWindow
	// of them) never starve the control stream, publish acks or the other
	// subscriptions.
	//
	// A node that died under a live connection is noticed when nothing
	// came from it for QUIC's idle timeout, counted from the last packet
	// received or, if later, the first packet sent after it (RFC 9000
	// §10.1). On a quiet connection that first packet is the keep-alive,
	// sent after keepAlive without traffic (quic-go caps it at half the
	// idle timeout), so a death goes unnoticed for at most keepAlive +
	// idle: a third and two thirds of WithIdleTimeout. (The node takes an
	// advertised idle timeout below 5 s as 5 s for itself; the
	// keep-alives come far sooner.)
	detect := max(o.idleTimeout, minIdleTimeout)
	keepAlive, idle := detect/3, detect-detect/3
	qconf := &quic.Config{
		HandshakeIdleTimeout:           o.dialTimeout,
		KeepAlivePeriod:                keepAlive,
		MaxIdleTimeout:                 idle,
		MaxIncomingStreams:             maxIncomingStreams,
		InitialStreamReceiveWindow:     streamReceiveWindow / 2,
		MaxStreamReceiveWindow:         streamReceiveWindow,
		InitialConnectionReceiveWindow: connectionReceiveWindow / 8,
		MaxConnectionReceiveWindow:     connectionReceiveWindow,
	}
	return &dialer{o: o, qconf: qconf, seeds: seeds}
}

// dialed is a handshaken connection: its session and control stream.
type dialed struct {
	s   *session
	ctl *quic.Stream
}

// dialOne connects to addr and handshakes, within the dial timeout and
// ctx, and makes the connection's session under sh.
func (d *dialer) dialOne(ctx context.Context, sh *shared, addr string) (dialed, error) {
	tlsConf, err := d.o.clientTLS(addr)
	if err != nil {
		return dialed{}, &DialError{Addr: addr, Err: fmt.Errorf("tls: %w", err)}
	}
	actx, cancel := context.WithTimeout(ctx, d.o.dialTimeout)
	defer cancel()
	noAnswer := func(err error) bool {
		var ht *quic.HandshakeTimeoutError
		var it *quic.IdleTimeoutError
		return errors.As(err, &ht) || errors.As(err, &it) ||
			(ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded))
	}
	conn, err := quic.DialAddr(actx, addr, tlsConf, d.qconf)
	if err != nil {
		if noAnswer(err) {
			err = &noAnswerError{timeout: d.o.dialTimeout, err: err}
		} else if ctx.Err() != nil {
			err = ctx.Err()
		}
		return dialed{}, &DialError{Addr: addr, Err: err}
	}
	ctl, welcome, err := handshake(actx, conn, d.o)
	if err != nil {
		code, msg := quic.ApplicationErrorCode(0), "handshake failed"
		var we *wire.Error
		if errors.As(err, &we) && we.Code.Retry() == wire.RetryFatal && isLocalDecodeCode(we.Code) {
			code, msg = quic.ApplicationErrorCode(we.Code), we.Error()
		}
		_ = conn.CloseWithError(code, msg)
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			err = &noAnswerError{timeout: d.o.dialTimeout, err: err}
		}
		return dialed{}, &DialError{Addr: addr, Err: err}
	}
	return dialed{s: newSession(sh, conn, addr, welcome), ctl: ctl}, nil
}

// refused reports whether err is a node's refusal of the client itself,
// which no other attempt would change (a fatal *Error from the node at
// Hello: unauthenticated, unsupported version, ...).
func refused(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code.Retry() == wire.RetryFatal
}

// dialSeeds tries the seeds in turn, starting at index first, until one
// answers; it returns the connection and the index of its seed, or every
// error (joined). A node's refusal ends it at once.
func (d *dialer) dialSeeds(ctx context.Context, sh *shared, first int) (dialed, int, error) {
	var errs []error
	for i := range d.seeds {
		k := (first + i) % len(d.seeds)
		dl, err := d.dialOne(ctx, sh, d.seeds[k])
		if err == nil {
			return dl, k, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || refused(err) {
			break
		}
	}
	if len(errs) == 1 {
		return dialed{}, 0, errs[0]
	}
	return dialed{}, 0, errors.Join(errs...)
}

// reconnectLoop is one reconnect after a loss: attempts paced by the
// backoff, each dialing the seeds in turn. It runs on a goroutine of the
// client (the connection actor starts it) and blocks; the actor hears its
// outcome as a message.
type reconnectLoop struct {
	// b is the schedule.
	b *backoff
	// clk times the waits; jitter draws their random part.
	clk    clock
	jitter func() float64
	// dial makes one attempt (every seed once, from first).
	dial func(ctx context.Context, first int) (dialed, int, error)
	// first is the index of the seed tried first.
	first int
}

// reconnectOutcome is how a reconnect loop ended: a connection (d.s set),
// or the attempts ran out (err is the last attempt's error, possibly nil),
// or the client closed (closed).
type reconnectOutcome struct {
	d        dialed
	seed     int
	attempts int
	err      error
	closed   bool
}

// run makes attempts until one connects, the policy allows no more, a node
// refuses the client, or ctx (the client's life) ends.
func (l *reconnectLoop) run(ctx context.Context) reconnectOutcome {
	var last error
	for {
		wait, ok := l.b.next(l.clk.Now(), l.jitter())
		if !ok {
			return reconnectOutcome{attempts: l.b.attempts, err: last}
		}
		if wait > 0 {
			fire, stop := l.clk.NewTimer(wait)
			select {
			case <-fire:
			case <-ctx.Done():
				stop()
				return reconnectOutcome{closed: true}
			}
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if dl := l.b.deadline(); !dl.IsZero() {
			actx, cancel = context.WithDeadline(ctx, dl)
		}
		d, seed, err := l.dial(actx, l.first)
		cancel()
		switch {
		case ctx.Err() != nil:
			if err == nil {
				d.s.fail(ErrClosed)
			}
			return reconnectOutcome{closed: true}
		case err == nil:
			return reconnectOutcome{d: d, seed: seed, attempts: l.b.attempts}
		case refused(err):
			return reconnectOutcome{attempts: l.b.attempts, err: err}
		}
		last = err
	}
}
