package main

import (
	"runtime"
	"syscall"
	"time"
)

// lockPacer pins the calling goroutine to its OS thread so that sleepFor can
// block that thread in nanosleep(2). The Go runtime's timers wake about a
// millisecond late for sub-millisecond sleeps, which at 2,000 records/s would
// dominate the latency measured from the schedule; nanosleep wakes within
// the kernel's timer slack (about 50 µs). Call the returned func when done.
func lockPacer() (unlock func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// sleepFor blocks the calling thread for d.
func sleepFor(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
