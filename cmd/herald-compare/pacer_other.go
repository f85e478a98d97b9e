//go:build !linux

package main

import "time"

// lockPacer does nothing where nanosleep(2) is not used.
func lockPacer() (unlock func()) { return func() {} }

// sleepFor sleeps for d with the Go runtime's timer.
func sleepFor(d time.Duration) { time.Sleep(d) }
