package client

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// A group member heartbeats (an ack frame with no cursor and no credit)
// whenever it has sent nothing on its group stream for its heartbeat
// interval, so the node does not expire it while the application works on
// its records. heartbeatPlan is the decision, a pure function; the group
// subscription actor applies it when its heartbeat goroutine (runHeartbeats)
// says a due time has passed.

// clock is the time source of a group subscription's heartbeats; tests
// inject a fake one.
type clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed (at once
	// for d <= 0), and a function that stops the timer.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// heartbeatInterval returns how often a member heartbeats: asked when
// positive, none when asked is negative, and by default a third of the
// session timeout the node granted (none if it granted none).
func heartbeatInterval(asked time.Duration, sessionMillis uint32) time.Duration {
	switch {
	case asked > 0:
		return asked
	case asked < 0 || sessionMillis == 0:
		return 0
	}
	return max(millis(sessionMillis)/3, time.Millisecond)
}

// heartbeatPlan decides, at now, for a member that last sent a frame at
// lastSent and heartbeats every interval, whether to heartbeat now, and when
// to look again (assuming that, if send, the heartbeat goes out at now).
func heartbeatPlan(now, lastSent time.Time, every time.Duration) (send bool, next time.Time) {
	due := lastSent.Add(every)
	if now.Before(due) {
		return false, due
	}
	return true, now.Add(every)
}

// runHeartbeats is a group subscription's heartbeat goroutine: for each
// time it receives on due, it tells the actor (heartbeatDue) once that time
// has passed. It exits when ctx ends, telling the actor (heartbeaterExited).
func runHeartbeats(ctx context.Context, clk clock, due <-chan time.Time, root *actor.RootContext, pid *actor.PID) {
	defer root.Send(pid, &heartbeaterExited{})
	var fire <-chan time.Time
	stop := func() bool { return false }
	defer func() { stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case at := <-due:
			stop()
			fire, stop = clk.NewTimer(at.Sub(clk.Now()))
		case <-fire:
			fire = nil
			root.Send(pid, &heartbeatDue{})
		}
	}
}
