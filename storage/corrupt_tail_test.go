package storage

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a crash or a damaged disk leaves in a BadgerLog's files, and what the
// log makes of it. Unlike TestBadgerTornTail, which rewrites values through
// Badger, these tests damage the bytes of the files on disk: Badger's value
// log (batches of 1 KiB or more), its tables (smaller batches, after a clean
// close) and its write-ahead log (smaller batches, as a kill -9 leaves them).

// diskBatch returns a batch at base whose records are token repeated up to
// size bytes, so that its bytes can be found in the database's files.
func diskBatch(base uint64, count uint32, token string, size int) Batch {
	return Batch{Base: base, Count: count, Timestamp: int64(base) + 1, Records: bytes.Repeat([]byte(token), size/len(token))}
}

// crashImage copies the files of the open database in dir to a new
// directory, as a kill -9 would leave them: Badger's writes so far are in
// the files (it writes through mmap and write calls, and syncs), its
// memtables are not flushed.
func crashImage(t *testing.T, dir string) string {
	t.Helper()
	img := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		in, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(img, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// findBytes returns the one file in dir that holds the records of b, and
// the position of the records in it.
func findBytes(t *testing.T, dir string, b Batch) (path string, at int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(raw, b.Records); i >= 0 {
			if path != "" {
				t.Fatalf("batch %d is in %s and %s", b.Base, path, p)
			}
			path, at = p, i
		}
	}
	if path == "" {
		t.Fatalf("batch %d is in no file of %s", b.Base, dir)
	}
	return path, at
}

// flipByte inverts a byte in the middle of b's records, on disk.
func flipByte(t *testing.T, dir string, b Batch) string {
	t.Helper()
	path, at := findBytes(t, dir, b)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[at+len(b.Records)/2] ^= 0xff
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(path)
}

// tearWrite cuts the file holding b in the middle of b's records, as a
// write that did not reach the disk whole.
func tearWrite(t *testing.T, dir string, b Batch) string {
	t.Helper()
	path, at := findBytes(t, dir, b)
	if err := os.Truncate(path, int64(at+len(b.Records)/2)); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(path)
}

// endOf returns the End of the last of bs, or 0 for none.
func endOf(bs []Batch) uint64 {
	if len(bs) == 0 {
		return 0
	}
	return bs[len(bs)-1].End()
}

// openLogged opens the log in dir with its warnings in logs.
func openLogged(t *testing.T, dir string, logs *logBuffer) *BadgerLog {
	t.Helper()
	o := testBadgerOptions(dir)
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	l, err := OpenBadger(o)
	if err != nil {
		t.Fatalf("OpenBadger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestBadgerCorruptTailOnDisk(t *testing.T) {
	a, b := ShardKey{Stream: 3, Shard: 0}, ShardKey{Stream: 3, Shard: 1}
	const big, small = 2000, 200 // above and below the value threshold (1 KiB)
	tests := []struct {
		name string
		// size is each batch's records bytes.
		size int
		// crash takes a crash image of the open log instead of closing it.
		crash bool
		// victim is the index of shard a's batch that is damaged.
		victim int
		// damage damages a batch on disk and returns the file's name.
		damage func(*testing.T, string, Batch) string
		// keptA and keptB are how many of each shard's batches recovery
		// keeps: its tail is where the first one it does not keep began.
		keptA, keptB int
		// detected: the log itself finds the damage (Read fails with
		// ErrCorrupt until Tail truncates it, and Tail logs it); otherwise
		// Badger drops the damaged write itself, whole.
		detected bool
	}{
		// The last write of shard a: a torn tail.
		{"value log, flipped byte", big, false, 3, flipByte, 3, 2, true},
		{"value log, torn write", big, false, 3, tearWrite, 3, 2, true},
		{"value log after kill -9, flipped byte", big, true, 3, flipByte, 3, 2, true},
		{"table, flipped byte", small, false, 3, flipByte, 3, 2, true},
		{"write-ahead log after kill -9, flipped byte", small, true, 3, flipByte, 3, 2, false},
		{"write-ahead log after kill -9, torn write", small, true, 3, tearWrite, 3, 2, false},
		// Badger truncates the newest value log file at a damaged entry
		// when it opens it, so every batch written after it loses its value
		// too, of any shard: each shard's log is truncated before the first
		// of its batches that is gone.
		{"value log, flipped byte before other batches", big, false, 1, flipByte, 1, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			// Written one commit at a time, in this order: a0 a1 b0 a2 b1 a3.
			as := []Batch{diskBatch(0, 2, "<a0>", tt.size), diskBatch(2, 3, "<a1>", tt.size), diskBatch(5, 1, "<a2>", tt.size), diskBatch(6, 4, "<a3>", tt.size)}
			bs := []Batch{diskBatch(0, 1, "<b0>", tt.size), diskBatch(1, 2, "<b1>", tt.size)}
			l := openTestBadger(t, dir)
			for _, ap := range []Append{{Shard: a, Batch: as[0]}, {Shard: a, Batch: as[1]}, {Shard: b, Batch: bs[0]}, {Shard: a, Batch: as[2]}, {Shard: b, Batch: bs[1]}, {Shard: a, Batch: as[3]}} {
				mustCommit(t, l, []Append{ap}, nil)
			}
			if tt.crash {
				dir = crashImage(t, dir)
			}
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			file := tt.damage(t, dir, as[tt.victim])
			t.Logf("damaged batch %d of shard a in %s", as[tt.victim].Base, file)

			var logs logBuffer
			l = openLogged(t, dir, &logs)
			if tt.detected {
				// Never served: a read that reaches the damaged batch fails.
				if got, err := l.Read(a, 0, 0, 0); !errors.Is(err, ErrCorrupt) || got != nil {
					t.Fatalf("Read before recovery = %v, %v; want ErrCorrupt", bases(got), err)
				}
			}
			wantTailFirst(t, l, a, endOf(as[:tt.keptA]), 0)
			wantTailFirst(t, l, b, endOf(bs[:tt.keptB]), 0)
			wantRead(t, l, a, 0, 0, 0, as[:tt.keptA])
			wantRead(t, l, b, 0, 0, 0, bs[:tt.keptB])
			wantRawBases(t, l, a, as[:tt.keptA])
			if n := strings.Count(logs.String(), "truncated corrupt batch"); tt.detected != (n > 0) {
				t.Fatalf("%d truncation warnings (detected %v); log:\n%s", n, tt.detected, logs.String())
			}

			// The shard goes on from its recovered tail, and that survives
			// a restart without another truncation.
			next := diskBatch(endOf(as[:tt.keptA]), 1, "<new>", tt.size)
			mustCommit(t, l, appendsOf(a, next), nil)
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			logs = logBuffer{}
			l = openLogged(t, dir, &logs)
			wantTailFirst(t, l, a, next.End(), 0)
			wantRead(t, l, a, 0, 0, 0, append(as[:tt.keptA:tt.keptA], next))
			if strings.Contains(logs.String(), "truncated") {
				t.Fatalf("truncation after reopen:\n%s", logs.String())
			}
		})
	}
}

// A damaged batch in the middle of a shard's log, in a value log file that
// is no longer the newest (which Badger does not check when it opens): the
// tail stays, and reads that reach the batch fail with ErrCorrupt instead of
// serving it; the batches around it are read as usual.
func TestBadgerCorruptMiddleOnDisk(t *testing.T) {
	s := ShardKey{Stream: 8}
	bs := []Batch{diskBatch(0, 2, "<m0>", 2000), diskBatch(2, 2, "<m1>", 2000), diskBatch(4, 2, "<m2>", 2000), diskBatch(6, 2, "<m3>", 2000)}
	dir := t.TempDir()
	l := openTestBadger(t, dir)
	mustCommit(t, l, appendsOf(s, bs[0]), nil)
	mustCommit(t, l, appendsOf(s, bs[1]), nil)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestBadger(t, dir) // a new value log file from here on
	mustCommit(t, l, appendsOf(s, bs[2]), nil)
	mustCommit(t, l, appendsOf(s, bs[3]), nil)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	file := flipByte(t, dir, bs[1])
	if newest := newestVlog(t, dir); file == newest {
		t.Fatalf("the damaged batch is in the newest value log file %s", file)
	}

	var logs logBuffer
	l = openLogged(t, dir, &logs)
	wantTailFirst(t, l, s, 8, 0)
	for _, from := range []uint64{0, 2, 3} {
		if got, err := l.Read(s, from, 0, 0); !errors.Is(err, ErrCorrupt) || got != nil {
			t.Fatalf("Read(%d) = %v, %v; want ErrCorrupt", from, bases(got), err)
		}
	}
	wantRead(t, l, s, 0, 1, 0, bs[:1])
	wantRead(t, l, s, 4, 0, 0, bs[2:])
	if strings.Contains(logs.String(), "truncated") {
		t.Fatalf("a batch in the middle was truncated:\n%s", logs.String())
	}
}

// newestVlog returns the name of the newest value log file in dir
// that holds more than its header.
func newestVlog(t *testing.T, dir string) string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	newest := ""
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.Size() > 20 {
			newest = filepath.Base(m) // Glob sorts, and names are zero-padded
		}
	}
	return newest
}

// kill -9 between Badger creating a write-ahead or value log file and
// giving it its size leaves the file empty, and Badger alone then refuses
// to open the database (badger#2207). OpenBadger opens it, with every
// batch.
func TestBadgerOpensWithEmptyLogFiles(t *testing.T) {
	s := ShardKey{Stream: 2}
	bs := []Batch{diskBatch(0, 2, "<e0>", 2000), diskBatch(2, 1, "<e1>", 100)}
	for _, files := range [][]string{{"00050.mem"}, {"000050.vlog"}, {"00050.mem", "00051.mem", "000050.vlog"}} {
		t.Run(strings.Join(files, "+"), func(t *testing.T) {
			dir := t.TempDir()
			l := openTestBadger(t, dir)
			mustCommit(t, l, appendsOf(s, bs...), nil)
			img := crashImage(t, dir)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if err := os.WriteFile(filepath.Join(img, f), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logs logBuffer
			l = openLogged(t, img, &logs)
			if !strings.Contains(logs.String(), "empty log files") {
				t.Fatalf("no warning; log:\n%s", logs.String())
			}
			wantTailFirst(t, l, s, 3, 0)
			wantRead(t, l, s, 0, 0, 0, bs)
			next := diskBatch(3, 1, "<e2>", 2000)
			mustCommit(t, l, appendsOf(s, next), nil)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLogged(t, img, &logs)
			wantRead(t, l, s, 0, 0, 0, append(bs[:2:2], next))
		})
	}
}
