package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// errCPUShared is returned for the CPU time of a server that runs inside
// this process: it cannot be told apart from the clients'.
var errCPUShared = errors.New("herald-compare: server shares this process; its CPU time is not separate")

// errCPUUnsupported is returned where CPU times are not read (outside
// Linux).
var errCPUUnsupported = errors.New("herald-compare: CPU times are read on Linux only")

// errProcStat is returned for a /proc/<pid>/stat line that cannot be parsed.
var errProcStat = errors.New("herald-compare: malformed /proc/<pid>/stat")

// clockTicksPerSecond is USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat (`getconf CLK_TCK`): 100 on every Linux architecture Go
// supports.
const clockTicksPerSecond = 100

// parseProcStatCPU returns utime + stime from the contents of
// /proc/<pid>/stat (proc(5): fields 14 and 15, in clock ticks). The second
// field, the command name, is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted from the last ')'.
func parseProcStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no command name", errProcStat)
	}
	// After the name come field 3 (state) onwards: utime is field 14,
	// the 12th after it.
	fields := bytes.Fields(stat[i+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("%w: %d fields after the command name", errProcStat, len(fields))
	}
	var ticks uint64
	for _, f := range [][]byte{fields[utime], fields[stime]} {
		n, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errProcStat, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / clockTicksPerSecond), nil
}

// cpuSample is the CPU time used so far by a scenario's server and by this
// process.
type cpuSample struct {
	server   time.Duration // the server's user + system time
	serverOK bool          // server was measured (the server runs in a child)
	client   time.Duration // this process's user + system time
	clientOK bool          // client was measured
}

// sampleCPU reads the server's and this process's CPU time. A server in
// this process, or a platform without the counters, leaves that side out;
// any other failure is an error.
func (s *natsServer) sampleCPU() (cpuSample, error) {
	var c cpuSample
	var err error
	c.server, err = s.runner.cpuTime()
	switch {
	case err == nil:
		c.serverOK = true
	case errors.Is(err, errCPUShared), errors.Is(err, errCPUUnsupported):
	default:
		return c, err
	}
	c.client, err = selfCPU()
	switch {
	case err == nil:
		c.clientOK = true
	case errors.Is(err, errCPUUnsupported):
	default:
		return c, err
	}
	return c, nil
}

// setCPU fills r's CPU fields with the time used from a to b, and the time
// per million of records (the records the scenario's rate counts; with
// none, the per-million fields stay absent).
func setCPU(r *Result, a, b cpuSample, records int) {
	set := func(total, perMillion **float64, d time.Duration) {
		s := d.Seconds()
		*total = &s
		if records > 0 {
			ms := s * 1e3 / (float64(records) / 1e6)
			*perMillion = &ms
		}
	}
	if a.serverOK && b.serverOK {
		set(&r.ServerCPUSeconds, &r.ServerCPUMillisPerMillion, b.server-a.server)
	}
	if a.clientOK && b.clientOK {
		set(&r.ClientCPUSeconds, &r.ClientCPUMillisPerMillion, b.client-a.client)
	}
}
