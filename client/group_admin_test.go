package client

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Consumer-group administration against a real node of this module in
// this process (startRealNode), and against the scripted node for a node
// without the feature.

// waitNoMembers describes g until it has no push members: a member's Close
// ends its stream, and the node notices on its own time. It asks in a loop,
// each ask a round trip, until a deadline.
func waitNoMembers(t *testing.T, g *Group) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := g.Describe(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Members) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s still has members %+v", g.Name(), info.Members)
		}
		time.Sleep(20 * time.Millisecond) // polling the node, not asserting time
	}
}

// pollOffsets polls up to max records of shard for g and returns their
// offsets and attempts.
func pollOffsets(t *testing.T, g *Group, shard uint32, max int) ([]uint64, []uint32, []GroupRecord) {
	t.Helper()
	recs, err := g.Poll(testCtx(t), shard, max, 0)
	if err != nil {
		t.Fatalf("poll of shard %d: %v", shard, err)
	}
	var offs []uint64
	var attempts []uint32
	for _, r := range recs {
		offs, attempts = append(offs, r.Offset), append(attempts, r.Attempts)
	}
	return offs, attempts, recs
}

// ListGroups, Group.Seek and Group.Delete against a real node: the list in
// name order with members and lag; seeks to an offset (clamped), a time,
// the earliest and the latest record, of one shard or all, refused while
// records are claimed or a member is joined, creating a group never used;
// deletes refused while a member is joined, of an unknown group
// ErrGroupNotFound, and the name starting afresh after one.
func TestGroupAdminAgainstNode(t *testing.T) {
	node := startRealNode(t, nil)
	c := node.dial()
	ctx := testCtx(t)
	if _, err := c.CreateStream(ctx, orders, StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if l, err := c.ListGroups(ctx, orders); err != nil || l == nil || len(l) != 0 {
		t.Fatalf("a stream without groups lists %#v, %v", l, err)
	}
	// Shard 0: one record a second from t0, 0..9. Shard 1: one every ten
	// seconds from t0, 0..3.
	for i := range 10 {
		node.publishAt(c, t0.Add(time.Duration(i)*time.Second), orders, 0, 2, 1)
	}
	for i := range 4 {
		node.publishAt(c, t0.Add(time.Duration(i)*10*time.Second), orders, 1, 2, 1)
	}

	// "zeta" settles three records by pull; "mid" has a push member.
	zeta := c.Group(orders, "zeta")
	_, _, claimed := pollOffsets(t, zeta, 0, 3)
	if n, err := zeta.Ack(ctx, claimed...); err != nil || n != 3 {
		t.Fatalf("ack: %d, %v", n, err)
	}
	mid := c.Group(orders, "mid")
	m, err := mid.Subscribe(ctx, WithMember("m1"), WithWindow(1))
	if err != nil {
		t.Fatal(err)
	}
	// A describe goes through each coordinator after what came before it,
	// so the figures the list reads are published by then.
	for _, g := range []*Group{zeta, mid} {
		if _, err := g.Describe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []GroupSummary{{Group: "mid", Members: 1, Lag: 14}, {Group: "zeta", Lag: 11}}
	if l, err := c.ListGroups(ctx, orders); err != nil || !slices.Equal(l, want) {
		t.Fatalf("list %+v, %v; want %+v", l, err, want)
	}

	// A joined member refuses a delete and a seek of its group.
	if err := mid.Delete(ctx); !errors.Is(err, ErrGroupInUse) {
		t.Fatalf("delete with a member: %v, want ErrGroupInUse", err)
	}
	if _, err := mid.Seek(ctx, AllShards, SeekToLatest()); !errors.Is(err, ErrGroupInUse) {
		t.Fatalf("seek with a member: %v, want ErrGroupInUse", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	waitNoMembers(t, mid)

	// Claims on shard 0 refuse a seek of shard 0 and of every shard, not one
	// of shard 1.
	_, _, claimed = pollOffsets(t, zeta, 0, 2)
	_, err = zeta.Seek(ctx, 0, SeekToOffset(1))
	var we *Error
	if !errors.Is(err, ErrGroupInUse) || !errors.As(err, &we) || we.Message == "" {
		t.Fatalf("seek with claims: %v, want ErrGroupInUse saying why", err)
	}
	if _, err := zeta.Seek(ctx, AllShards, SeekToOffset(1)); !errors.Is(err, ErrGroupInUse) {
		t.Fatalf("seek of every shard with claims on one: %v", err)
	}
	if got, err := zeta.Seek(ctx, 1, SeekToOffset(2)); err != nil || !maps.Equal(got, map[uint32]uint64{1: 2}) {
		t.Fatalf("seek of shard 1: %v, %v", got, err)
	}
	if _, err := zeta.Ack(ctx, claimed...); err != nil {
		t.Fatal(err)
	}

	// Back to offset 1 on shard 0: 1.. come again, first attempt.
	if got, err := zeta.Seek(ctx, 0, SeekToOffset(1)); err != nil || !maps.Equal(got, map[uint32]uint64{0: 1}) {
		t.Fatalf("seek back: %v, %v", got, err)
	}
	if offs, attempts, recs := pollOffsets(t, zeta, 0, 3); !slices.Equal(offs, []uint64{1, 2, 3}) || !slices.Equal(attempts, []uint32{1, 1, 1}) {
		t.Fatalf("after the seek back: %v %v", offs, attempts)
	} else if _, err := zeta.Ack(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	// To a time: every shard where OffsetsForTime says (shard 0 at its
	// record of t0+3s, shard 1 at its first at or after it, t0+10s).
	at := t0.Add(3 * time.Second)
	wantAt, err := c.OffsetsForTime(ctx, orders, at)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := zeta.Seek(ctx, AllShards, SeekToTime(at)); err != nil || !maps.Equal(got, wantAt) || !maps.Equal(got, map[uint32]uint64{0: 3, 1: 1}) {
		t.Fatalf("seek to t0+3s: %v, %v; OffsetsForTime says %v", got, err, wantAt)
	}
	// A time in the future: the tails. The earliest and the latest, and
	// offsets past the tail, clamped.
	for _, tc := range []struct {
		name  string
		shard uint32
		to    SeekTarget
		want  map[uint32]uint64
	}{
		{"the future", AllShards, SeekToTime(t0.Add(time.Hour)), map[uint32]uint64{0: 10, 1: 4}},
		{"the zero time", AllShards, SeekToTime(time.Time{}), map[uint32]uint64{0: 0, 1: 0}},
		{"latest", AllShards, SeekToLatest(), map[uint32]uint64{0: 10, 1: 4}},
		{"earliest", AllShards, SeekToEarliest(), map[uint32]uint64{0: 0, 1: 0}},
		{"the zero target", 1, SeekTarget{}, map[uint32]uint64{1: 0}},
		{"past the tail", 1, SeekToOffset(1000), map[uint32]uint64{1: 4}},
		{"an offset, every shard", AllShards, SeekToOffset(5), map[uint32]uint64{0: 5, 1: 4}},
	} {
		if got, err := zeta.Seek(ctx, tc.shard, tc.to); err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("seek to %s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if info, err := zeta.Describe(ctx); err != nil || info.Shards[0].Committed != 5 || info.Shards[1].Committed != 4 || info.Lag() != 5 {
		t.Fatalf("describe after the seeks: %+v, %v", info, err)
	}
	if _, err := zeta.Seek(ctx, 2, SeekToEarliest()); !errors.Is(err, ErrInvalidShard) {
		t.Fatalf("seek of shard 2 of 2: %v", err)
	}

	// A seek of a group never used creates it there.
	fresh := c.Group(orders, "fresh")
	if got, err := fresh.Seek(ctx, AllShards, SeekToOffset(8)); err != nil || !maps.Equal(got, map[uint32]uint64{0: 8, 1: 4}) {
		t.Fatalf("seek of a new group: %v, %v", got, err)
	}
	if offs, _, _ := pollOffsets(t, fresh, 0, 5); !slices.Equal(offs, []uint64{8, 9}) {
		t.Fatalf("the new group polled %v", offs)
	}

	// Delete: gone from the list and to describe; a second delete and one
	// of a group never used are ErrGroupNotFound; the name starts afresh.
	if err := mid.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mid.Delete(ctx); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("second delete: %v, want ErrGroupNotFound", err)
	}
	if err := c.Group(orders, "never").Delete(ctx); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("delete of a group never used: %v, want ErrGroupNotFound", err)
	}
	if _, err := mid.Describe(ctx); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("describe after the delete: %v", err)
	}
	if l, err := c.ListGroups(ctx, orders); err != nil || len(l) != 2 || l[0].Group != "fresh" || l[1].Group != "zeta" {
		t.Fatalf("list after the delete: %+v, %v", l, err)
	}
	if offs, attempts, _ := pollOffsets(t, mid, 0, 2); !slices.Equal(offs, []uint64{0, 1}) || !slices.Equal(attempts, []uint32{1, 1}) {
		t.Fatalf("the name after the delete polled %v %v", offs, attempts)
	}
	// Claims held by pull consumers do not hold up a delete.
	if err := mid.Delete(ctx); err != nil {
		t.Fatalf("delete with pull claims: %v", err)
	}
}

// Bad input fails before anything is sent, with the typed errors; the
// node refuses an ephemeral stream and one that does not exist.
func TestGroupAdminErrors(t *testing.T) {
	node := startRealNode(t, nil)
	c := node.dial()
	ctx := testCtx(t)
	ticks := StreamName{Tenant: "acme", Namespace: "shop", Stream: "ticks"}
	if _, err := c.CreateStream(ctx, ticks, StreamConfig{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	nope := StreamName{Tenant: "acme", Namespace: "shop", Stream: "nope"}
	bad := StreamName{Tenant: "acme", Namespace: "shop", Stream: "a b"}
	for _, tc := range []struct {
		name   string
		stream StreamName
		group  string
		want   error
	}{
		{"an ephemeral stream", ticks, "g", ErrStreamNotDurable},
		{"no such stream", nope, "g", ErrStreamNotFound},
		{"a bad stream name", bad, "g", ErrInvalidStreamName},
		{"a bad group name", orders, "a/b", ErrInvalidRequest},
		{"an empty group name", orders, "", ErrInvalidRequest},
	} {
		g := c.Group(tc.stream, tc.group)
		if err := g.Delete(ctx); !errors.Is(err, tc.want) {
			t.Errorf("delete, %s: %v, want %v", tc.name, err, tc.want)
		}
		if _, err := g.Seek(ctx, AllShards, SeekToEarliest()); !errors.Is(err, tc.want) {
			t.Errorf("seek, %s: %v, want %v", tc.name, err, tc.want)
		}
		if tc.group == "g" {
			if _, err := c.ListGroups(ctx, tc.stream); !errors.Is(err, tc.want) {
				t.Errorf("list, %s: %v, want %v", tc.name, err, tc.want)
			}
		}
	}
}

// A node without group_admin: ListGroups, Delete and Seek fail with an
// *UnsupportedError and send nothing.
func TestGroupAdminUnsupported(t *testing.T) {
	srv := newTestServer(t)
	srv.welcome.Features &^= wire.FeatureGroupAdmin
	srv.onControl = func(sc *serverConn, f wire.Frame) {
		t.Errorf("a %v went to a node without group_admin", f.Header.Type)
	}
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	g := c.Group(orders, "g")
	check := func(what string, err error) {
		t.Helper()
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Feature != "group_admin" || !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s on an old node: %v (%T)", what, err, err)
		}
	}
	_, err := c.ListGroups(ctx, orders)
	check("ListGroups", err)
	check("Delete", g.Delete(ctx))
	_, err = g.Seek(ctx, 0, SeekToTime(t0))
	check("Seek", err)
}

// A seek answered with another shard's position fails as a protocol
// violation.
func TestGroupSeekAnswerChecked(t *testing.T) {
	srv := newTestServer(t)
	frames := ctlScript(srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Group(orders, "g").Seek(ctx, 1, SeekToOffset(3))
		done <- err
	}()
	f := nextFrame(t, frames, wire.TypeGroupSeek)
	s, err := wire.DecodeGroupSeek(f.Body)
	if err != nil || s.Name != orders || s.Group != "g" || s.Shard != 1 || s.To != wire.SeekToOffset || s.Offset != 3 {
		t.Fatalf("seek frame %+v, %v", s, err)
	}
	sc := <-srv.conns
	sc.writeCtl(wire.AppendShardOffsets(nil, f.Header.RequestID, []wire.ShardOffset{{Shard: 0, Offset: 3}}))
	select {
	case err := <-done:
		wantCode(t, err, wire.CodeProtocolViolation)
	case <-ctx.Done():
		t.Fatal("the seek never returned")
	}
}
