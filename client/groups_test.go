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
		string(r.Key) != "key" || string(r.Headers.Get("h")) != "v" || string(r.Payload) != fmt.Sprint("p", off) {
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
		recs, err = c.Group(orders, "fulfilment").Poll(ctx, 2, 32, 5*time.Second)
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
		recs, err = c.Group(orders, "fulfilment").Poll(ctx, 0, 1, time.Microsecond)
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
		_, err := c.Group(orders, "fulfilment").Poll(ctx, 0, 10, 0)
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
		if _, err := c.Group(orders, bad.group).Poll(ctx, 0, bad.max, bad.wait); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Poll(%q, %d, %v): %v, want ErrInvalidRequest", bad.group, bad.max, bad.wait, err)
		}
	}
	if _, err := c.Group(StreamName{}, "g").Poll(ctx, 0, 1, 0); !errors.Is(err, ErrInvalidStreamName) {
		t.Errorf("Poll of a bad stream name: %v", err)
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
			if _, err := c.Group(orders, "g").Poll(testCtx(t), 0, 1, 0); !errors.Is(err, ErrProtocolViolation) {
				t.Fatalf("poll: %v, want ErrProtocolViolation", err)
			}
		})
	}
}

// TestGroupAckNack: acks and nacks carry their offsets and return the
// count of the node's GroupDone; an Error refuses them.
func TestGroupAckNack(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")

	var n int
	done := goCall(func() (err error) { n, err = g.AckOffsets(ctx, 1, 4, 5, 9); return err })
	f := nextFrame(t, frames, wire.TypeGroupAck)
	a, err := wire.DecodeGroupAck(f.Body)
	if err != nil || a.Name != orders || a.Group != "fulfilment" || a.Shard != 1 || fmt.Sprint(a.Offsets) != "[4 5 9]" {
		t.Fatalf("ack = %+v, %v", a, err)
	}
	sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 2)) // one was settled already
	if err := <-done; err != nil || n != 2 {
		t.Fatalf("ack: %d, %v; want 2 settled", n, err)
	}

	done = goCall(func() (err error) { n, err = g.NackOffsets(ctx, 1, 12); return err })
	f = nextFrame(t, frames, wire.TypeGroupNack)
	if a, _ := wire.DecodeGroupAck(f.Body); a.Shard != 1 || fmt.Sprint(a.Offsets) != "[12]" {
		t.Fatalf("nack = %+v", a)
	}
	sc.writeCtl(wire.AppendError(nil, f.Header.RequestID, &wire.Error{Code: wire.CodeNotDelivered, Detail: 10}))
	var we *Error
	if err := <-done; !errors.Is(err, ErrNotDelivered) || !errors.As(err, &we) || we.Detail != 10 || n != 0 {
		t.Fatalf("nack refused: %d, %v; want 0 and ErrNotDelivered with detail 10", n, err)
	}

	if _, err := g.AckOffsets(ctx, 1); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("ack of nothing: %v", err)
	}
	if _, err := g.NackOffsets(ctx, 1, make([]uint64, wire.MaxGroupAckOffsets+1)...); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("nack of too many: %v", err)
	}
	if _, err := g.Ack(ctx); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("ack of no records: %v", err)
	}
	if _, err := g.Nack(ctx, make([]GroupRecord, wire.MaxGroupAckOffsets+1)...); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("nack of too many records of one shard: %v", err)
	}
	if _, err := c.Group(orders, "bad group").Ack(ctx, GroupRecord{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("ack in a bad group name: %v", err)
	}
	select {
	case f := <-frames:
		t.Fatalf("a refused call sent %v", f.Header.Type)
	default:
	}
}

// TestGroupAckRecords: Ack and Nack of records send one request per shard,
// in the order the shards first appear, and sum the node's counts; a
// refused request stops there, returning what the requests before it
// settled.
func TestGroupAckRecords(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	sc := <-srv.conns
	ctx := testCtx(t)
	g := c.Group(orders, "fulfilment")
	rec := func(shard uint32, off uint64) GroupRecord { return GroupRecord{Shard: shard, Offset: off} }
	recs := []GroupRecord{rec(2, 7), rec(0, 3), rec(2, 8), rec(1, 1), rec(0, 4)}

	for _, nack := range []bool{false, true} {
		settle, typ := g.Ack, wire.TypeGroupAck
		if nack {
			settle, typ = g.Nack, wire.TypeGroupNack
		}
		var n int
		done := goCall(func() (err error) { n, err = settle(ctx, recs...); return err })
		var sent []string
		for i, count := range []uint64{2, 1, 0} {
			f := nextFrame(t, frames, typ)
			a, err := wire.DecodeGroupAck(f.Body)
			if err != nil || a.Name != orders || a.Group != "fulfilment" {
				t.Fatalf("request %d = %+v, %v", i, a, err)
			}
			sent = append(sent, fmt.Sprintf("%d:%v", a.Shard, a.Offsets))
			sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, count))
		}
		if err := <-done; err != nil || n != 3 {
			t.Fatalf("nack %v: %d settled, %v; want 3", nack, n, err)
		}
		if fmt.Sprint(sent) != "[2:[7 8] 0:[3 4] 1:[1]]" {
			t.Fatalf("nack %v: requests %v, want one per shard in order of appearance", nack, sent)
		}
	}

	// The second shard's request is refused: the third is never sent.
	var n int
	done := goCall(func() (err error) { n, err = g.Ack(ctx, recs...); return err })
	f := nextFrame(t, frames, wire.TypeGroupAck)
	sc.writeCtl(wire.AppendGroupDone(nil, f.Header.RequestID, 2))
	f = nextFrame(t, frames, wire.TypeGroupAck)
	sc.writeCtl(wire.AppendError(nil, f.Header.RequestID, &wire.Error{Code: wire.CodeNotDelivered, Detail: 4}))
	if err := <-done; !errors.Is(err, ErrNotDelivered) || n != 2 {
		t.Fatalf("ack refused on its second shard: %d, %v; want 2 and ErrNotDelivered", n, err)
	}
	select {
	case f := <-frames:
		t.Fatalf("sent %v after the refusal", f.Header.Type)
	default:
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
		polled, err = c.Group(orders, "fulfilment").Poll(ctx, 0, 8, 30*time.Second)
		return err
	})
	pollFrame := nextFrame(t, frames, wire.TypeGroupPoll)

	ack := goCall(func() error { _, err := c.Group(orders, "fulfilment").AckOffsets(ctx, 3, 1); return err })
	ackFrame := nextFrame(t, frames, wire.TypeGroupAck)
	var info GroupInfo
	describe := goCall(func() (err error) {
		info, err = c.Group(orders, "fulfilment").Describe(ctx)
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

	// Every shard, from 0, up to the node's cap; more says the node's cap
	// left some out.
	var letters []DeadLetter
	var more bool
	done := goCall(func() (err error) {
		letters, more, err = c.Group(orders, "fulfilment").DeadLetters(ctx, AllShards, 0, 0)
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
		letters, more, err = c.Group(orders, "fulfilment").DeadLetters(ctx, 2, 9, 50)
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
		n, err = c.Group(orders, "fulfilment").Redrive(ctx, AllShards)
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
		n, err = c.Group(orders, "fulfilment").Discard(ctx, 2, 8, 11)
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
	if _, err := c.Group(orders, "fulfilment").Discard(ctx, AllShards, 8); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("discard of offsets of every shard: %v", err)
	}

	// Describe converts durations.
	var info GroupInfo
	done = goCall(func() (err error) {
		info, err = c.Group(orders, "fulfilment").Describe(ctx)
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
		"poll":     func() error { _, err := c.Group(orders, "g").Poll(ctx, 0, 1, 0); return err },
		"ack":      func() error { _, err := c.Group(orders, "g").AckOffsets(ctx, 0, 1); return err },
		"nack":     func() error { _, err := c.Group(orders, "g").NackOffsets(ctx, 0, 1); return err },
		"ack recs": func() error { _, err := c.Group(orders, "g").Ack(ctx, GroupRecord{Offset: 1}); return err },
		"nack recs": func() error {
			_, err := c.Group(orders, "g").Nack(ctx, GroupRecord{Offset: 1})
			return err
		},
		"dead":     func() error { _, _, err := c.Group(orders, "g").DeadLetters(ctx, AllShards, 0, 0); return err },
		"redrive":  func() error { _, err := c.Group(orders, "g").Redrive(ctx, AllShards); return err },
		"discard":  func() error { _, err := c.Group(orders, "g").Discard(ctx, AllShards); return err },
		"describe": func() error { _, err := c.Group(orders, "g").Describe(ctx); return err },
		"subscribe": func() error {
			gs, err := c.Group(orders, "g").Subscribe(ctx)
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
