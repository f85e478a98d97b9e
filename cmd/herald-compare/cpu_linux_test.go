package main

import (
	"os"
	"testing"
	"time"
)

// TestProcessCPUAgreesWithRusage reads this process's CPU time both ways
// around a busy loop: /proc/<pid>/stat (what the child's CPU comes from) and
// getrusage(2) must agree within /proc's resolution and the loop's drift.
func TestProcessCPUAgreesWithRusage(t *testing.T) {
	proc0, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self0, err := selfCPU()
	if err != nil {
		t.Fatal(err)
	}
	var spin uint64
	for self, _ := selfCPU(); self-self0 < 200*time.Millisecond; self, _ = selfCPU() {
		for i := range 100_000 {
			spin += uint64(i)
		}
	}
	proc1, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self1, err := selfCPU()
	if err != nil {
		t.Fatal(err)
	}
	dProc, dSelf := proc1-proc0, self1-self0
	if diff := (dProc - dSelf).Abs(); diff > 50*time.Millisecond {
		t.Errorf("/proc says %v, getrusage %v (spin %d)", dProc, dSelf, spin)
	}
}
