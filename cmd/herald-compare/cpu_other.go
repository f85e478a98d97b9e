//go:build !linux

package main

import "time"

// processCPU is not measured outside Linux.
func processCPU(int) (time.Duration, error) { return 0, errCPUUnsupported }

// selfCPU is not measured outside Linux.
func selfCPU() (time.Duration, error) { return 0, errCPUUnsupported }
