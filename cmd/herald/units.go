package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Byte sizes and durations are written the same way in the node's config
// file, its HERALD_<KEY> variables and the client commands' flags: a size is
// an integer optionally followed by KiB, MiB or GiB (parseSize), a duration
// is Go syntax with days added (parseDuration: "7d", "1d12h", "90s").

// day is the length of the "d" unit parseDuration accepts.
const day = 24 * time.Hour

// parseDuration parses Go duration syntax ("500ms", "1m30s", "72h") with one
// more unit, d for days of 24 h, which must come first: "7d", "1.5d",
// "1d12h". Errors wrap errBadValue.
func parseDuration(text string) (time.Duration, error) {
	s := strings.TrimSpace(text)
	bad := fmt.Errorf("%w %q: want a duration such as 500ms, 10s, 1m30s, 72h or 7d", errBadValue, text)
	days, rest, hasDays := strings.Cut(s, "d")
	if !hasDays {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, bad
		}
		return d, nil
	}
	n, err := strconv.ParseFloat(days, 64)
	if err != nil || days == "" || strings.ContainsAny(days, "eEnNiIxXpP_") {
		return 0, bad
	}
	total := n * float64(day)
	if rest != "" {
		if rest[0] == '-' || rest[0] == '+' {
			return 0, bad
		}
		d, err := time.ParseDuration(rest)
		if err != nil {
			return 0, bad
		}
		if n < 0 || strings.HasPrefix(days, "-") {
			total -= float64(d)
		} else {
			total += float64(d)
		}
	}
	if total > math.MaxInt64 || total < math.MinInt64 {
		return 0, fmt.Errorf("%w %q: out of range", errBadValue, text)
	}
	return time.Duration(total), nil
}

// formatDuration prints d as parseDuration reads it, in days when d is a
// whole number of them ("7d"), else in Go syntax ("1h30m0s").
func formatDuration(d time.Duration) string {
	if d != 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// formatSize prints n bytes as parseSize reads it: in the largest of GiB,
// MiB and KiB that divides it ("10GiB"), else in bytes ("1000").
func formatSize(n int64) string {
	for i := len(sizeSuffixes) - 1; i >= 0; i-- {
		u := sizeSuffixes[i]
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// durationFlag is a flag holding a duration in parseDuration's syntax; it
// implements pflag.Value.
type durationFlag time.Duration

func (v *durationFlag) String() string { return formatDuration(time.Duration(*v)) }

// Type names the value in usage text.
func (v *durationFlag) Type() string { return "duration" }

func (v *durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return unwrapBadValue(err)
	}
	*v = durationFlag(d)
	return nil
}

// sizeFlag is a flag holding a byte count in parseSize's syntax; it
// implements pflag.Value.
type sizeFlag int64

func (v *sizeFlag) String() string { return formatSize(int64(*v)) }

// Type names the value in usage text.
func (v *sizeFlag) Type() string { return "bytes" }

func (v *sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return unwrapBadValue(err)
	}
	*v = sizeFlag(n)
	return nil
}

// unwrapBadValue drops the "invalid value" prefix of a parse error: the
// flag parser says "invalid argument" already.
func unwrapBadValue(err error) error {
	msg := strings.TrimPrefix(err.Error(), errBadValue.Error()+" ")
	return fmt.Errorf("%s", msg)
}
