package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// processCPU returns the user + system CPU time of process pid so far, from
// /proc/<pid>/stat (10 ms resolution).
func processCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	d, err := parseProcStatCPU(stat)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return d, nil
}

// selfCPU returns this process's user + system CPU time so far, from
// getrusage(2) (microsecond resolution). Children are not included.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
