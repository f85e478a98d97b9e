package main

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"
)

// progressBar draws `herald pub --count`'s progress on a terminal: one line
// redrawn in place ("\r") with the records acknowledged, the rate and the
// time left. Only a terminal gets one (cmd.progress is set only then), so
// pipes, files and tests see only the summary.
type progressBar struct {
	// w is the terminal; written only by the drawing goroutine, and by
	// finish after it ended.
	w io.Writer
	// total is the number of records to publish.
	total int
	// start is when the bar started.
	start time.Time
	// records and bytes count what was acknowledged (add, from the ack
	// printer goroutine).
	records, bytes atomic.Int64
	// stop asks the drawing goroutine to end; stopped is closed when it
	// has.
	stop, stopped chan struct{}
}

// startProgress starts drawing a bar for total records on w every every.
// Call finish to stop it.
func startProgress(w io.Writer, total int, every time.Duration) *progressBar {
	p := &progressBar{w: w, total: total, start: time.Now(), stop: make(chan struct{}), stopped: make(chan struct{})}
	go p.draw(every)
	return p
}

// draw redraws the bar every tick until stop.
func (p *progressBar) draw(every time.Duration) {
	defer close(p.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			fmt.Fprint(p.w, "\r"+p.line())
		}
	}
}

// add counts records and bytes acknowledged.
func (p *progressBar) add(records, bytes int) {
	p.records.Add(int64(records))
	p.bytes.Add(int64(bytes))
}

// finish stops the drawing, draws the last state and ends the line.
func (p *progressBar) finish() {
	close(p.stop)
	<-p.stopped
	fmt.Fprint(p.w, "\r"+p.line()+"\n")
}

// line is the bar's current text.
func (p *progressBar) line() string {
	return renderProgress(int(p.records.Load()), p.total, p.bytes.Load(), time.Since(p.start), 30)
}

// renderProgress draws "[#######.......]  45.0%  90000/200000 records
// 31234 rec/s 4.0 MB/s ETA 3s" with a bar of width characters.
func renderProgress(done, total int, bytes int64, elapsed time.Duration, width int) string {
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	filled := int(frac * float64(width))
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	secs := elapsed.Seconds()
	rate, mbps := 0.0, 0.0
	if secs > 0 {
		rate, mbps = float64(done)/secs, float64(bytes)/secs/1e6
	}
	eta := "--"
	switch {
	case done >= total:
		eta = "0s"
	case rate > 0:
		eta = (time.Duration(float64(total-done)/rate*float64(time.Second)) + time.Second/2).Truncate(time.Second).String()
	}
	return fmt.Sprintf("[%s] %5.1f%%  %d/%d records  %.0f rec/s  %.1f MB/s  ETA %s  ", bar, frac*100, done, total, rate, mbps, eta)
}
