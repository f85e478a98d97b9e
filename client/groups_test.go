package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// groupTS is the commit timestamp of the scripted group records.
const groupTS = int64(1_700_000_000_000_000_000)

// groupRec encodes the record recs(off, 1) as a claimed group record.
func groupRec(shard uint32, off uint64, attempts uint32) wire.GroupRecord {
	r := recs(off, 1)[0]
	return wire.GroupRecord{Shard: shard, Offset: off, Attempts: attempts, Timestamp: groupTS, Record: wire.AppendRecord(nil, &r)}
}

// checkGroupRecord fails the test unless r is groupRec(shard, off, attempts)
// decoded.
func checkGroupRecord(t *testing.T, r GroupRecord, shard uint32, off uint64, attempts uint32) {
	t.Helper()
	if r.Shard != shard || r.Offset != off || r.Attempts != attempts || r.Timestamp.UnixNano() != groupTS ||
		string(r.Key) != "key" || string(r.Headers["h"]) != "v" || string(r.Payload) != fmt.Sprint("p", off) {
		t.Fatalf("record = %+v, want shard %d offset %d attempts %d", r, shard, off, attempts)
	}
}

// ctlScript makes the scripted node hand every control frame to the test,
// which answers it with sc.writeCtl (in any order).
func ctlScript(srv *testServer) chan wire.Frame {
	frames := make(chan wire.Frame, 16)
	srv.onControl = func(sc *serverConn, f wire.Frame) { frames <- f }
	return frames
}

// nextFrame returns the next control frame, failing unless it has type typ.
func nextFrame(t *testing.T, frames chan wire.Frame, typ wire.Type) wire.Frame {
	t.Helper()
	select {
	case f := <-frames:
		if f.Header.Type != typ {
			t.Fatalf("control frame %v, want %v", f.Header.Type, typ)
		}
		return f
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v frame", typ)
		return wire.Frame{}
	}
}

// goCall runs call on its own goroutine and returns its error's channel.
func goCall(call func() error) chan error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	return done
}

// TestGroupPoll: the poll carries its limits, and its answer's records are
// decoded with their attempts.
func TestGroupPoll(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)

	var recs []GroupRecord
	done := goCall(func() (err error) {
		recs, err = c.GroupPoll(ctx, orders, 2, "fulfilment", 32, 5*time.Second)
		return err
	})
	f := nextFrame(t, frames, wire.TypeGroupPoll)
	p, err := wire.DecodeGroupPoll(f.Body)
	if err != nil {
		t.Fatal(err)
	}
	if p != (wire.GroupPoll{Name: orders, Group: "fulfilment", Shard: 2, Max: 32, WaitMillis: 5000}) {
		t.Fatalf("poll = %+v", p)
	}
	sc.writeCtl(wire.AppendGroupRecords(nil, f.Header.RequestID, wire.GroupRecords{
		Records: []wire.GroupRecord{groupRec(2, 7, 1), groupRec(2, 9, 3)}}))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	checkGroupRecord(t, recs[0], 2, 7, 1)
	checkGroupRecord(t, recs[1], 2, 9, 3)

	// Nothing to deliver: an empty answer, and a sub-millisecond wait rounds
	// up rather than to "no wait".
	done = goCall(func() (err error) {
		recs, err = c.GroupPoll(ctx, orders, 0, "fulfilment", 1, time.Microsecond)
		return err
	})
	f = nextFrame(t, frames, wire.TypeGroupPoll)
	if p, _ := wire.DecodeGroupPoll(f.Body); p.WaitMillis != 1 || p.Max != 1 {
		t.Fatalf("poll = %+v", p)
	}
	sc.writeCtl(wire.AppendGroupRecords(nil, f.Header.RequestID, wire.GroupRecords{}))
	if err := <-done; err != nil || len(recs) != 0 {
		t.Fatalf("empty poll: %d records, %v", len(recs), err)
	}

	// The node's refusal.
	done = goCall(func() error {
		_, err := c.GroupPoll(ctx, orders, 0, "fulfilment", 10, 0)
		return err
	})
	f = nextFrame(t, frames, wire.TypeGroupPoll)
	sc.writeCtl(wire.AppendError(nil, f.Header.RequestID, wire.Errorf(wire.CodeTooManyClaims, "10000 claims")))
	if err := <-done; !errors.Is(err, ErrTooManyClaims) {
		t.Fatalf("poll refused: %v, want ErrTooManyClaims", err)
	}

	// Bad input fails before anything is sent.
	for _, bad := range []struct {
		group string
		max   int
		wait  time.Duration
	}{
		{"fulfilment", 0, 0},
		{"fulfilment", -1, 0},
		{"fulfilment", 1, -time.Second},
		{"", 1, 0},
		{"no spaces", 1, 0},
	} {
		if _, err := c.GroupPoll(ctx, orders, 0, bad.group, bad.max, bad.wait); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("GroupPoll(%q, %d, %v): %v, want ErrInvalidRequest", bad.group, bad.max, bad.wait, err)
		}
	}
	if _, err := c.GroupPoll(ctx, StreamName{}, 0, "g", 1, 0); !errors.Is(err, ErrInvalidStreamName) {
		t.Errorf("GroupPoll of a bad stream name: %v", err)
	}
	select {
	case f := <-frames:
		t.Fatalf("a bad poll sent %v", f.Header.Type)
	default:
	}
}

// TestGroupPollBadAnswer: a poll answered with a cursor, with too many
// records or with another shard's record is a protocol violation.
func TestGroupPollBadAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		ans  wire.GroupRecords
	}{
		{"cursor", wire.GroupRecords{Cursor: []byte("c"), Records: []wire.GroupRecord{groupRec(0, 1, 1)}}},
		{"too many", wire.GroupRecords{Records: []wire.GroupRecord{groupRec(0, 1, 1), groupRec(0, 2, 1)}}},
		{"other shard", wire.GroupRecords{Records: []wire.GroupRecord{groupRec(1, 1, 1)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestServer(t)
			srv.onControl = func(sc *serverConn, f wire.Frame) {
				sc.writeCtl(wire.AppendGroupRecords(nil, f.Header.RequestID, tc.ans))
			}
			srv.start()
			c := srv.dial(t)
			if _, err := c.GroupPoll(testCtx(t), orders, 0, "g", 1, 0); !errors.Is(err, ErrProtocolViolation) {
				t.Fatalf("poll: %v, want ErrProtocolViolation", err)
			}
		})
	}
}

// TestGroupAckNack: acks and nacks carry their offsets; GroupDone answers
// them, an Error refuses them.
func TestGroupAckNack(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)

	done := goCall(func() error { return c.GroupAck(ctx, orders, 1, "fulfilment", 4, 5, 9) })
	f := nextFrame(t, frames, wire.TypeGroupAck)
	a, err := wire.DecodeGroupAck(f.Body)
	if err != nil || a.Name != orders || a.Group != "fulfilment" || a.Shard != 1 || fmt.Sprint(a.Offsets) != "[4 5 9]" {
		t.Fatalf("ack = %+v, %v", a, err)
	}
	sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 3))
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	done = goCall(func() error { return c.GroupNack(ctx, orders, 1, "fulfilment", 12) })
	f = nextFrame(t, frames, wire.TypeGroupNack)
	if a, _ := wire.DecodeGroupAck(f.Body); a.Shard != 1 || fmt.Sprint(a.Offsets) != "[12]" {
		t.Fatalf("nack = %+v", a)
	}
	sc.writeCtl(wire.AppendError(nil, f.Header.RequestID, &wire.Error{Code: wire.CodeNotDelivered, Detail: 10}))
	var we *Error
	if err := <-done; !errors.Is(err, ErrNotDelivered) || !errors.As(err, &we) || we.Detail != 10 {
		t.Fatalf("nack refused: %v, want ErrNotDelivered with detail 10", err)
	}

	if err := c.GroupAck(ctx, orders, 1, "fulfilment"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("ack of nothing: %v", err)
	}
	if err := c.GroupNack(ctx, orders, 1, "fulfilment", make([]uint64, wire.MaxGroupAckOffsets+1)...); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("nack of too many: %v", err)
	}
}

// TestGroupAnswersOutOfOrder: a poll waiting for records does not hold up
// the calls after it; each answer reaches its own caller.
func TestGroupAnswersOutOfOrder(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)

	var polled []GroupRecord
	poll := goCall(func() (err error) {
		polled, err = c.GroupPoll(ctx, orders, 0, "fulfilment", 8, 30*time.Second)
		return err
	})
	pollFrame := nextFrame(t, frames, wire.TypeGroupPoll)

	ack := goCall(func() error { return c.GroupAck(ctx, orders, 3, "fulfilment", 1) })
	ackFrame := nextFrame(t, frames, wire.TypeGroupAck)
	var info GroupInfo
	describe := goCall(func() (err error) {
		info, err = c.DescribeGroup(ctx, orders, "fulfilment")
		return err
	})
	descFrame := nextFrame(t, frames, wire.TypeDescribeGroup)

	// Answer the latest first, then the ack; the poll still waits.
	sc.writeCtl(wire.AppendGroupInfo(nil, descFrame.Header.RequestID, wire.GroupInfo{Group: "fulfilment", Generation: 2}))
	if err := <-describe; err != nil || info.Generation != 2 {
		t.Fatalf("describe: %+v, %v", info, err)
	}
	sc.writeCtl(wire.AppendGroupDone(nil, ackFrame.Header.RequestID, 1))
	if err := <-ack; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-poll:
		t.Fatalf("the poll returned (%v) before its answer", err)
	default:
	}
	sc.writeCtl(wire.AppendGroupRecords(nil, pollFrame.Header.RequestID, wire.GroupRecords{
		Records: []wire.GroupRecord{groupRec(0, 40, 2)}}))
	if err := <-poll; err != nil || len(polled) != 1 {
		t.Fatalf("poll: %d records, %v", len(polled), err)
	}
	checkGroupRecord(t, polled[0], 0, 40, 2)
}

// TestGroupDeadLetters: listing, redrive, discard and describe carry their
// selection, and their answers are converted.
func TestGroupDeadLetters(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)

	// Every shard by default; more says the limit left some out.
	var letters []DeadLetter
	var more bool
	done := goCall(func() (err error) {
		letters, more, err = c.GroupDeadLetters(ctx, orders, "fulfilment")
		return err
	})
	f := nextFrame(t, frames, wire.TypeGroupDeadLetters)
	q, err := wire.DecodeGroupDeadLetters(f.Body)
	if err != nil || q != (wire.GroupDeadLetters{Name: orders, Group: "fulfilment", Shard: wire.AnyShard}) {
		t.Fatalf("dead letters = %+v, %v", q, err)
	}
	sc.writeCtl(wire.AppendGroupDeadList(nil, f.Header.RequestID, wire.GroupDeadList{More: true, Letters: []wire.DeadLetter{
		{Shard: 0, Offset: 3, Attempts: 5, DeadUnixNano: 2e9, Reason: "attempts"},
		{Shard: 2, Offset: 8, Attempts: 1, DeadUnixNano: 3e9, Reason: "nacked"},
	}}))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []DeadLetter{
		{Shard: 0, Offset: 3, Attempts: 5, DeadAt: time.Unix(0, 2e9), Reason: "attempts"},
		{Shard: 2, Offset: 8, Attempts: 1, DeadAt: time.Unix(0, 3e9), Reason: "nacked"},
	}
	if !more || fmt.Sprint(letters) != fmt.Sprint(want) {
		t.Fatalf("dead letters %+v more %v, want %+v more true", letters, more, want)
	}

	// One shard, from an offset, limited.
	done = goCall(func() (err error) {
		letters, more, err = c.GroupDeadLetters(ctx, orders, "fulfilment", DeadLetterShard(2), DeadLetterFrom(9), DeadLetterLimit(50))
		return err
	})
	f = nextFrame(t, frames, wire.TypeGroupDeadLetters)
	if q, _ := wire.DecodeGroupDeadLetters(f.Body); q.Shard != 2 || q.From != 9 || q.Limit != 50 {
		t.Fatalf("dead letters = %+v", q)
	}
	sc.writeCtl(wire.AppendError(nil, f.Header.RequestID, wire.Errorf(wire.CodeGroupNotFound, "fulfilment")))
	if err := <-done; !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("dead letters of an unknown group: %v", err)
	}

	// Redrive everything; discard two offsets of one shard.
	var n int
	done = goCall(func() (err error) {
		n, err = c.GroupRedrive(ctx, orders, "fulfilment", AllShards)
		return err
	})
	f = nextFrame(t, frames, wire.TypeGroupRedrive)
	if s, err := wire.DecodeGroupSelect(f.Body); err != nil || s.Shard != wire.AnyShard || len(s.Offsets) != 0 || s.Group != "fulfilment" {
		t.Fatalf("redrive = %+v, %v", s, err)
	}
	sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 7))
	if err := <-done; err != nil || n != 7 {
		t.Fatalf("redrive: %d, %v", n, err)
	}
	done = goCall(func() (err error) {
		n, err = c.GroupDiscard(ctx, orders, "fulfilment", 2, 8, 11)
		return err
	})
	f = nextFrame(t, frames, wire.TypeGroupDiscard)
	if s, err := wire.DecodeGroupSelect(f.Body); err != nil || s.Shard != 2 || fmt.Sprint(s.Offsets) != "[8 11]" {
		t.Fatalf("discard = %+v, %v", s, err)
	}
	sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 1))
	if err := <-done; err != nil || n != 1 {
		t.Fatalf("discard: %d, %v", n, err)
	}
	if _, err := c.GroupDiscard(ctx, orders, "fulfilment", AllShards, 8); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("discard of offsets of every shard: %v", err)
	}

	// Describe converts durations.
	var info GroupInfo
	done = goCall(func() (err error) {
		info, err = c.DescribeGroup(ctx, orders, "fulfilment")
		return err
	})
	f = nextFrame(t, frames, wire.TypeDescribeGroup)
	if d, err := wire.DecodeDescribeGroup(f.Body); err != nil || d != (wire.DescribeGroup{Name: orders, Group: "fulfilment"}) {
		t.Fatalf("describe = %+v, %v", d, err)
	}
	sc.writeCtl(wire.AppendGroupInfo(nil, f.Header.RequestID, wire.GroupInfo{
		Group: "fulfilment", Generation: 4, VisibilityMillis: 30000, SessionMillis: 10000, MaxAttempts: 5,
		Shards:  []wire.GroupShardInfo{{Shard: 0, Committed: 10, Delivered: 14, Tail: 20, Claims: 3, Owed: 1, DeadLetters: 2}},
		Members: []wire.GroupMemberInfo{{ID: "m1", Shards: []uint32{0}, Window: 100, InFlight: 3, IdleMillis: 1500}},
	}))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantInfo := GroupInfo{Group: "fulfilment", Generation: 4, Visibility: 30 * time.Second, Session: 10 * time.Second, MaxAttempts: 5,
		Shards:  []GroupShardInfo{{Shard: 0, Committed: 10, Delivered: 14, Tail: 20, Claims: 3, Owed: 1, DeadLetters: 2}},
		Members: []GroupMemberInfo{{ID: "m1", Shards: []uint32{0}, Window: 100, InFlight: 3, Idle: 1500 * time.Millisecond}},
	}
	if fmt.Sprintf("%+v", info) != fmt.Sprintf("%+v", wantInfo) {
		t.Fatalf("info = %+v, want %+v", info, wantInfo)
	}
}

// TestGroupsUnsupported: against a node without FeatureGroups every group
// call fails at once, with a clear error.
func TestGroupsUnsupported(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.Features &^= wire.FeatureGroups
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	calls := map[string]func() error{
		"poll":     func() error { _, err := c.GroupPoll(ctx, orders, 0, "g", 1, 0); return err },
		"ack":      func() error { return c.GroupAck(ctx, orders, 0, "g", 1) },
		"nack":     func() error { return c.GroupNack(ctx, orders, 0, "g", 1) },
		"dead":     func() error { _, _, err := c.GroupDeadLetters(ctx, orders, "g"); return err },
		"redrive":  func() error { _, err := c.GroupRedrive(ctx, orders, "g", AllShards); return err },
		"discard":  func() error { _, err := c.GroupDiscard(ctx, orders, "g", AllShards); return err },
		"describe": func() error { _, err := c.DescribeGroup(ctx, orders, "g"); return err },
		"subscribe": func() error {
			gs, err := c.SubscribeGroup(ctx, orders, "g")
			if gs != nil {
				_ = gs.Close()
			}
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrInvalidRequest) || err != errGroupsUnsupported {
			t.Errorf("%s: %v, want errGroupsUnsupported", name, err)
		}
	}
	select {
	case f := <-frames:
		t.Fatalf("sent %v to a node without groups", f.Header.Type)
	default:
	}
}
