package bench

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// progressInterval is how often the progress line is redrawn.
const progressInterval = 250 * time.Millisecond

// benchProgress draws one line on a terminal: the current phase, its
// elapsed time and the rate of its counter. On anything else it draws
// nothing. Its goroutine is started by newBenchProgress and stopped by
// close, which waits for it.
type benchProgress struct {
	// w is the terminal; nil disables the display.
	w io.Writer
	// stop ends the goroutine; done is closed when it has ended.
	stop, done chan struct{}
	// closeOnce makes close idempotent.
	closeOnce sync.Once
	// mu protects phase.
	mu struct {
		sync.Mutex
		// phase is what is drawn; nil between phases.
		phase *progressPhase
	}
}

// progressPhase is one measured step shown by benchProgress.
type progressPhase struct {
	// label names the step.
	label string
	// unit names what count counts.
	unit string
	// count is advanced by the scenario; nil shows only the time.
	count *atomic.Int64
	// length is the step's planned length; 0 when it runs to a count.
	length time.Duration
	// start is when the step began.
	start time.Time
}

// newBenchProgress returns a progress display on stderr, which draws only
// when terminal says stderr is a terminal.
func newBenchProgress(stderr io.Writer, terminal bool) *benchProgress {
	p := &benchProgress{stop: make(chan struct{}), done: make(chan struct{})}
	if !terminal {
		close(p.done)
		return p
	}
	p.w = stderr
	go p.run()
	return p
}

// phase starts showing a new step. count may be nil; length may be 0.
func (p *benchProgress) phase(label, unit string, count *atomic.Int64, length time.Duration) {
	p.mu.Lock()
	p.mu.phase = &progressPhase{label: label, unit: unit, count: count, length: length, start: time.Now()}
	p.mu.Unlock()
}

func (p *benchProgress) run() {
	defer close(p.done)
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-t.C:
			p.mu.Lock()
			ph := p.mu.phase
			p.mu.Unlock()
			if ph != nil {
				fmt.Fprint(p.w, "\r\033[K"+ph.line(time.Now()))
			}
		}
	}
}

// line renders the phase at now.
func (ph *progressPhase) line(now time.Time) string {
	el := now.Sub(ph.start)
	s := ph.label + "  " + el.Truncate(100*time.Millisecond).String()
	if ph.length > 0 {
		s += "/" + ph.length.String()
	}
	if ph.count != nil {
		n := ph.count.Load()
		s += fmt.Sprintf("  %d %s", n, ph.unit)
		if secs := el.Seconds(); secs > 0 {
			s += fmt.Sprintf(" (%.0f/s)", float64(n)/secs)
		}
	}
	return s
}

// close stops the display, clears its line and waits for its goroutine.
func (p *benchProgress) close() {
	p.closeOnce.Do(func() { close(p.stop) })
	<-p.done
}
