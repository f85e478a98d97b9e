package client

import (
	"time"
)

// Defaults of Reconnect.
const (
	// DefaultReconnectTimeout is how long the client keeps trying to
	// reconnect after one loss before it gives up (Reconnect.Timeout).
	DefaultReconnectTimeout = 2 * time.Minute
	// DefaultReconnectInitialDelay is the wait before the second attempt
	// (the first one is immediate); each later wait doubles.
	DefaultReconnectInitialDelay = 100 * time.Millisecond
	// DefaultReconnectMaxDelay caps the wait between attempts.
	DefaultReconnectMaxDelay = 2 * time.Second
	// DefaultReconnectJitter is the fraction of each wait that is random.
	DefaultReconnectJitter = 0.5
)

// Reconnect says how a Client reconnects after it lost its connection (the
// node restarted, crashed, sent GoAway, or became unreachable). The zero
// value of every field means its default; WithReconnect(Reconnect{}) is the
// default behaviour.
//
// After a loss the client makes attempts: the first at once, the next after
// InitialDelay, each later one after twice the previous wait, capped at
// MaxDelay, each wait shortened by a random part of up to Jitter of it (so
// that many clients of one restarted node do not come back in step). An
// attempt dials every address given to Dial in turn, starting with the one
// after the address that was lost, each within the dial timeout
// (WithDialTimeout). It stops at the first node that answers, or when
// MaxAttempts attempts failed or Timeout has passed since the loss, and then
// the client is done: every call fails (with a *ReconnectError) and the
// ConnectionClosed event says why. A node that refuses the client itself
// (ErrUnauthenticated, ErrUnsupportedVersion, ...) ends the attempts at once.
type Reconnect struct {
	// MaxAttempts bounds the attempts after one loss; 0: no bound by count.
	MaxAttempts int
	// Timeout bounds how long the client keeps trying after one loss
	// (default DefaultReconnectTimeout, 2 minutes); negative: no bound by
	// time, so with MaxAttempts 0 the client tries until Close.
	Timeout time.Duration
	// InitialDelay is the wait before the second attempt (default 100 ms).
	InitialDelay time.Duration
	// MaxDelay caps the wait between attempts (default 2 s).
	MaxDelay time.Duration
	// Jitter is the fraction, in [0, 1], of each wait that is random:
	// a wait d is drawn from [d·(1−Jitter), d] (default 0.5; negative: none).
	Jitter float64
}

// WithReconnect sets how the client reconnects after a lost connection
// (see Reconnect). Reconnecting is on by default, with Reconnect's defaults.
func WithReconnect(r Reconnect) Option {
	return func(o *options) { o.reconnect, o.reconnectPolicy = true, r }
}

// WithoutReconnect turns reconnecting off: once the connection is lost,
// every pending and later call fails with the connection's error, as do the
// subscriptions and group members (the ConnectionDisconnected and then the
// ConnectionClosed event say so), and the Client can only be closed.
func WithoutReconnect() Option { return func(o *options) { o.reconnect = false } }

// normalized returns r with its defaults filled in.
func (r Reconnect) normalized() Reconnect {
	if r.MaxAttempts < 0 {
		r.MaxAttempts = 0
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultReconnectTimeout
	}
	if r.InitialDelay <= 0 {
		r.InitialDelay = DefaultReconnectInitialDelay
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = DefaultReconnectMaxDelay
	}
	r.MaxDelay = max(r.MaxDelay, r.InitialDelay)
	switch {
	case r.Jitter == 0:
		r.Jitter = DefaultReconnectJitter
	case r.Jitter < 0:
		r.Jitter = 0
	case r.Jitter > 1:
		r.Jitter = 1
	}
	return r
}

// backoff is the reconnect schedule after one loss, the deterministic core
// of the reconnect loop: given the time and a random number it says how long
// to wait before the next attempt, or that the policy allows no more. It
// does no I/O and reads no clock of its own.
type backoff struct {
	// p is the normalized policy.
	p Reconnect
	// start is when the connection was lost.
	start time.Time
	// attempts is how many attempts next has allowed.
	attempts int
}

// newBackoff returns the schedule of a loss at start under p (normalized
// here).
func newBackoff(p Reconnect, start time.Time) *backoff {
	return &backoff{p: p.normalized(), start: start}
}

// next returns the wait before the next attempt, at now, with r in [0, 1)
// drawing the jitter, and counts the attempt; ok is false when the policy
// allows no more attempts (MaxAttempts made, or Timeout would have passed
// by the time the attempt starts).
func (b *backoff) next(now time.Time, r float64) (wait time.Duration, ok bool) {
	if b.p.MaxAttempts > 0 && b.attempts >= b.p.MaxAttempts {
		return 0, false
	}
	if b.attempts > 0 {
		wait = b.p.InitialDelay
		for i := 1; i < b.attempts && wait < b.p.MaxDelay; i++ {
			wait *= 2
		}
		wait = min(wait, b.p.MaxDelay)
		wait -= time.Duration(float64(wait) * b.p.Jitter * min(max(r, 0), 1))
	}
	if b.p.Timeout > 0 && !now.Add(wait).Before(b.start.Add(b.p.Timeout)) {
		return 0, false
	}
	b.attempts++
	return wait, true
}

// deadline returns when the attempts must end (zero: no bound by time).
func (b *backoff) deadline() time.Time {
	if b.p.Timeout <= 0 {
		return time.Time{}
	}
	return b.start.Add(b.p.Timeout)
}
