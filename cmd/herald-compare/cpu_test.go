package main

import (
	"errors"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	// proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags
	// minflt cminflt majflt cmajflt utime stime ...
	tests := []struct {
		name string
		stat string
		want time.Duration
	}{
		{"plain", "4242 (herald-compare) S 1 4242 4242 0 -1 4194560 3000 0 0 0 1234 56 0 0 20 0 9 0 100 0 0", 12900 * time.Millisecond},
		{"name with spaces and parentheses", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 5 6 20 0", 70 * time.Millisecond},
		{"zero", "1 (x) S 0 0 0 0 0 0 0 0 0 0 0 0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStatCPU([]byte(tt.stat))
			if err != nil || got != tt.want {
				t.Errorf("= %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{
		"",
		"42 no parentheses S 1 2 3 4 5 6 7 8 9 10 11 12",
		"42 (short) S 1 2 3",
		"42 (nan) S 1 2 3 4 5 6 7 8 9 10 x 12",
		"42 (neg) S 1 2 3 4 5 6 7 8 9 10 -1 12",
	} {
		if _, err := parseProcStatCPU([]byte(bad)); !errors.Is(err, errProcStat) {
			t.Errorf("parseProcStatCPU(%q) = %v, want %v", bad, err, errProcStat)
		}
	}
}

func TestSetCPU(t *testing.T) {
	a := cpuSample{server: time.Second, serverOK: true, client: 2 * time.Second, clientOK: true}
	b := cpuSample{server: 3 * time.Second, serverOK: true, client: 2500 * time.Millisecond, clientOK: true}
	var r Result
	setCPU(&r, a, b, 4_000_000)
	if r.ServerCPUSeconds == nil || *r.ServerCPUSeconds != 2 || r.ServerCPUMillisPerMillion == nil || *r.ServerCPUMillisPerMillion != 500 {
		t.Errorf("server %v s, %v ms/M; want 2 s, 500 ms/M", r.ServerCPUSeconds, r.ServerCPUMillisPerMillion)
	}
	if r.ClientCPUSeconds == nil || *r.ClientCPUSeconds != 0.5 || r.ClientCPUMillisPerMillion == nil || *r.ClientCPUMillisPerMillion != 125 {
		t.Errorf("client %v s, %v ms/M; want 0.5 s, 125 ms/M", r.ClientCPUSeconds, r.ClientCPUMillisPerMillion)
	}

	// A server in this process: only the client side; no records: no
	// per-million figure.
	var shared Result
	a.serverOK = false
	setCPU(&shared, a, b, 0)
	if shared.ServerCPUSeconds != nil || shared.ServerCPUMillisPerMillion != nil {
		t.Error("server CPU set without a server measurement")
	}
	if shared.ClientCPUSeconds == nil || shared.ClientCPUMillisPerMillion != nil {
		t.Errorf("client %v s, %v ms/M; want a total and no per-million", shared.ClientCPUSeconds, shared.ClientCPUMillisPerMillion)
	}
}
