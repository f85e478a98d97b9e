package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// CPU time per million records: each measured cell reads the node's CPU
// (its process's utime+stime from /proc/PID/stat) and this process's
// (getrusage) at its start and end, and divides by the records the cell
// counts (acked, delivered, settled or read).

// clockTicks is the unit of /proc/PID/stat's utime and stime (USER_HZ,
// 100 on Linux, which exposes no other value to user space).
const clockTicks = 100

// errProcStat is returned when /proc/PID/stat cannot be read as such.
var errProcStat = errors.New("bench: malformed /proc stat")

// processCPU returns the user and system time of process pid.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(b)
}

// parseProcStat returns utime+stime of a /proc/PID/stat line. The command
// name (field 2) is in parentheses and may hold spaces and parentheses, so
// the fields are counted from the last ')'; utime and stime are fields 14
// and 15, in clock ticks.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no command name", errProcStat)
	}
	// After the name: field 3 (state) is the first.
	fields := bytes.Fields(b[i+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("%w: %d fields after the name", errProcStat, len(fields))
	}
	var ticks int64
	for _, f := range [][]byte{fields[utime], fields[stime]} {
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: %q is not a tick count", errProcStat, f)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / clockTicks), nil
}

// selfCPU returns this process's user and system time.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// cpuSample is the CPU used so far by the node and by this process.
type cpuSample struct {
	// node is the node process's; valid only with nodeOK (a node in this
	// process has no CPU of its own).
	node   time.Duration
	nodeOK bool
	// self is this process's: the clients', and the node's when nodeOK is
	// false.
	self time.Duration
}

// sampleCPU reads n's and this process's CPU now.
func sampleCPU(n node) (cpuSample, error) {
	var s cpuSample
	var err error
	if s.node, s.nodeOK, err = n.cpu(); err != nil {
		return s, fmt.Errorf("node CPU: %w", err)
	}
	if s.self, err = selfCPU(); err != nil {
		return s, fmt.Errorf("own CPU: %w", err)
	}
	return s, nil
}

// CPU is a measured cell's CPU time, whole and per million of its records.
// Embedded in a cell, its fields are the cell's.
type CPU struct {
	// CPURecords is what the per-million figures divide by: acked records
	// (publish), deliveries (fanout, latency), acked records (groups), read
	// records (replay).
	CPURecords int64 `json:"cpu_records"`
	// NodeCPUSeconds is the node process's CPU (user+system) over the
	// cell; absent when the node ran in this process (--in-process).
	NodeCPUSeconds *float64 `json:"node_cpu_seconds,omitempty"`
	// NodeCPUMsPerMillion is NodeCPUSeconds in milliseconds per million
	// CPURecords.
	NodeCPUMsPerMillion *float64 `json:"node_cpu_ms_per_million_records,omitempty"`
	// ClientCPUSeconds is this process's CPU over the cell: the clients',
	// and the node's too when it ran in this process.
	ClientCPUSeconds float64 `json:"client_cpu_seconds"`
	// ClientCPUMsPerMillion is ClientCPUSeconds in milliseconds per million
	// CPURecords.
	ClientCPUMsPerMillion float64 `json:"client_cpu_ms_per_million_records"`
}

// cpuBetween is the CPU used from from to to, divided over records.
func cpuBetween(from, to cpuSample, records int64) CPU {
	perMillion := func(d time.Duration) float64 {
		if records <= 0 {
			return 0
		}
		return float64(d) / float64(time.Millisecond) / float64(records) * 1e6
	}
	c := CPU{CPURecords: records, ClientCPUSeconds: (to.self - from.self).Seconds(),
		ClientCPUMsPerMillion: perMillion(to.self - from.self)}
	if from.nodeOK && to.nodeOK {
		secs, ms := (to.node - from.node).Seconds(), perMillion(to.node-from.node)
		c.NodeCPUSeconds, c.NodeCPUMsPerMillion = &secs, &ms
	}
	return c
}

// columns formats c for the text tables: node and client ms per million
// records ("-" for the node when it shared this process).
func (c CPU) columns() string {
	return fmt.Sprintf("%10s %10.0f", c.nodeMs(), c.ClientCPUMsPerMillion)
}

// nodeMs formats the node's ms per million records, "-" when the node
// shared this process.
func (c CPU) nodeMs() string {
	if c.NodeCPUMsPerMillion == nil {
		return "-"
	}
	return strconv.FormatFloat(*c.NodeCPUMsPerMillion, 'f', 0, 64)
}

// cpuHeader is the header of CPU.columns.
var cpuHeader = fmt.Sprintf("%10s %10s", "node ms/M", "client ms/M")
