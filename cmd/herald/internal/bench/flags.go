package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// parseSizes parses a comma-separated list of byte sizes; each is a number
// with an optional k/KiB or m/MiB suffix (powers of 1024).
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		lower := strings.ToLower(f)
		for _, suf := range []struct {
			s string
			m int
		}{{"kib", 1 << 10}, {"k", 1 << 10}, {"mib", 1 << 20}, {"m", 1 << 20}, {"b", 1}} {
			if strings.HasSuffix(lower, suf.s) {
				lower, mult = strings.TrimSpace(strings.TrimSuffix(lower, suf.s)), suf.m
				break
			}
		}
		n, err := strconv.Atoi(lower)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("invalid size %q", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// parseDurability parses --durable: true, false or both.
func parseDurability(s string) ([]bool, error) {
	switch strings.ToLower(s) {
	case "both":
		return []bool{true, false}, nil
	case "true", "durable":
		return []bool{true}, nil
	case "false", "ephemeral":
		return []bool{false}, nil
	}
	return nil, fmt.Errorf("invalid --durable %q (want true, false or both)", s)
}

// parseFanouts parses --fanouts: a comma-separated list of positive
// subscriber counts.
func parseFanouts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("invalid count %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}
