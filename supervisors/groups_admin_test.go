package supervisors

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// Consumer-group administration spoken by hand through a real node: list a
// stream's groups, delete one, seek one, and what a restart keeps of it.

// listGroups asks for jobs' groups.
func (r *rawConn) listGroups(id uint64, name wire.StreamName) []wire.GroupSummary {
	r.t.Helper()
	f := r.call(id, wire.AppendListGroups(nil, id, name))
	if f.Header.Type != wire.TypeGroupList {
		r.t.Fatalf("list groups: %s %s", f.Header.Type, errFrame(f))
	}
	l, err := wire.DecodeGroupList(f.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// describeGroup returns jobs' group's state, or fails.
func (r *rawConn) describeGroup(id uint64, group string) wire.GroupInfo {
	r.t.Helper()
	f := r.call(id, wire.AppendDescribeGroup(nil, id, wire.DescribeGroup{Name: jobs, Group: group}))
	info, err := wire.DecodeGroupInfo(f.Body)
	if err != nil {
		r.t.Fatalf("describe %s: %v %s", group, err, errFrame(f))
	}
	return info
}

// seek sends a GroupSeek and returns its answer frame.
func (r *rawConn) seek(id uint64, g wire.GroupSeek) wire.Frame {
	r.t.Helper()
	if g.Name == (wire.StreamName{}) {
		g.Name = jobs
	}
	return r.call(id, wire.AppendGroupSeek(nil, id, g))
}

// seekOK seeks and returns the positions it answers.
func (r *rawConn) seekOK(id uint64, g wire.GroupSeek) []wire.ShardOffset {
	r.t.Helper()
	f := r.seek(id, g)
	if f.Header.Type != wire.TypeShardOffsets {
		r.t.Fatalf("seek %+v: %s %s", g, f.Header.Type, errFrame(f))
	}
	offs, err := wire.DecodeShardOffsets(f.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return offs
}

// pollOffsets polls a shard of jobs' group and returns (offset, attempts)
// of what it claimed.
func (r *rawConn) pollOffsets(id uint64, group string, shard, max uint32) [][2]uint64 {
	r.t.Helper()
	g := decodeRecords(r.t.(*testing.T), r.call(id, wire.AppendGroupPoll(nil, id, wire.GroupPoll{Name: jobs, Group: group, Shard: shard, Max: max})))
	out := make([][2]uint64, len(g.Records))
	for i, rec := range g.Records {
		out[i] = [2]uint64{rec.Offset, uint64(rec.Attempts)}
	}
	return out
}

// ack acks (or nacks) offsets of a shard of jobs' group and wants GroupDone.
func (r *rawConn) ack(id uint64, group string, shard uint32, nack bool, offs ...uint64) {
	r.t.Helper()
	f := r.call(id, wire.AppendGroupAck(nil, id, nack, wire.GroupAck{Name: jobs, Group: group, Shard: shard, Offsets: offs}))
	if f.Header.Type != wire.TypeGroupDone {
		r.t.Fatalf("ack %v: %s %s", offs, f.Header.Type, errFrame(f))
	}
}

// waitMembers describes the group until it has n push members.
func (r *rawConn) waitMembers(group string, n int) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for id := uint64(5000); ; id++ {
		if info := r.describeGroup(id, group); len(info.Members) == n {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("group %s never had %d members", group, n)
		}
	}
}

// storedGroups returns the names of the groups with keys in the node's
// durable store, each with its key count.
func storedGroups(t *testing.T, n *Node) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := n.durable.ScanMeta([]byte{'G'}, func(k, _ []byte) error {
		// 'G' | stream id | group length | group | ...
		if len(k) < 10 || len(k) < 10+int(k[9]) {
			return fmt.Errorf("group key %x", k)
		}
		out[string(k[10:10+int(k[9])])]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// leave closes a group push stream: the member leaves.
func leave(s *quic.Stream) {
	_ = s.Close()
	s.CancelRead(0)
}

// ListGroups answers a stream's groups in name order with their push
// members and lag as the coordinators publish them, from storage after a
// restart; an ephemeral stream is stream_not_durable.
func TestGroupList(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	c := dialRaw(t, n)
	c.createDurable(jobs, 2)
	if l := c.listGroups(1, jobs); len(l) != 0 {
		t.Fatalf("a stream with no groups lists %+v", l)
	}
	c.publishN(jobs, 0, 10) // all to shard 0
	c.pollOffsets(2, "zeta", 0, 4)
	s, _ := joinRaw(t, c, 4, "mid", "m1", 3)
	decodeRecords(t, c.read(s))
	want := []wire.GroupSummary{{Group: "mid", Members: 1, Lag: 10}, {Group: "zeta", Lag: 10}}
	deadline := time.Now().Add(10 * time.Second)
	for id := uint64(10); ; id++ {
		l := c.listGroups(id, jobs)
		if slices.Equal(l, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list %+v, want %+v", l, want)
		}
	}
	// Acks move the lag.
	c.ack(100, "zeta", 0, false, 0, 1, 2)
	want[1].Lag = 7
	for id := uint64(101); !slices.Equal(c.listGroups(id, jobs), want); id++ {
		if time.Now().After(deadline) {
			t.Fatalf("list after acks: %+v", c.listGroups(id, jobs))
		}
	}
	leave(s)

	sCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(sCtx); err != nil {
		t.Fatal(err)
	}
	n = testNode(t, dir)
	c = dialRaw(t, n)
	want = []wire.GroupSummary{{Group: "mid", Lag: 10}, {Group: "zeta", Lag: 7}}
	deadline = time.Now().Add(10 * time.Second)
	for id := uint64(200); ; id++ {
		l := c.listGroups(id, jobs)
		if slices.Equal(l, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a restart: list %+v, want %+v", l, want)
		}
	}
	eph := wire.StreamName{Tenant: "acme", Namespace: "shop", Stream: "ticks"}
	if f := c.call(300, wire.AppendCreateStream(nil, 300, wire.CreateStream{Name: eph, Config: wire.StreamConfig{Shards: 1}})); f.Header.Type != wire.TypeStreamInfo {
		t.Fatal(errFrame(f))
	}
	wantErrCode(t, c.call(301, wire.AppendListGroups(nil, 301, eph)), wire.CodeStreamNotDurable)
	wantErrCode(t, c.call(302, wire.AppendListGroups(nil, 302, wire.StreamName{Tenant: "acme", Namespace: "shop", Stream: "nope"})), wire.CodeStreamNotFound)
}

// A delete is refused while a push member holds the group; then it answers
// the polls that waited, deletes every key of the group and nothing of its
// neighbours, drops its metrics, and the name starts a new group at the
// first record, whose cursors the old group's are not. The deletion
// survives a restart.
func TestGroupDelete(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	c := dialRaw(t, n)
	c.createDurable(jobs, 1)
	c.publishN(jobs, 0, 4)
	c.pollOffsets(1, "keep", 0, 2)
	c.ack(2, "keep", 0, false, 0)

	// A push member holds "work": the delete is refused.
	s, a := joinRaw(t, c, 10, "work", "m1", 2)
	old := decodeRecords(t, c.read(s))
	if len(old.Records) == 0 || a.Generation != 1 {
		t.Fatalf("push %+v, assignment %+v", old, a)
	}
	f := c.call(11, wire.AppendDeleteGroup(nil, 11, wire.DeleteGroup{Name: jobs, Group: "work"}))
	wantErrCode(t, f, wire.CodeGroupInUse)
	if e, _ := wire.DecodeError(f.Body); !bytes.Contains([]byte(e.Message), []byte("push members")) {
		t.Fatalf("the refusal does not say why: %v", e)
	}
	leave(s)
	c.waitMembers("work", 0)

	// Claim everything (the member's records are owed again), then leave a
	// poll waiting for more: the delete answers it.
	if got := c.pollOffsets(20, "work", 0, 10); len(got) != 4 {
		t.Fatalf("claimed %v", got)
	}
	if series := scrapeSeries(t, n); series[`herald_group_lag{group="work",stream="acme/shop/jobs"}`] != 4 {
		t.Fatalf("before the delete: herald_group_lag of work = %v", series[`herald_group_lag{group="work",stream="acme/shop/jobs"}`])
	}
	c.write(c.control, wire.AppendGroupPoll(nil, 21, wire.GroupPoll{Name: jobs, Group: "work", Max: 1, WaitMillis: 20_000}))
	c.write(c.control, wire.AppendDeleteGroup(nil, 22, wire.DeleteGroup{Name: jobs, Group: "work"}))
	answers := map[uint64]wire.Frame{}
	for len(answers) < 2 {
		f := c.read(c.control)
		answers[f.Header.RequestID] = f
	}
	wantErrCode(t, answers[21], wire.CodeGroupNotFound)
	if answers[22].Header.Type != wire.TypeOK {
		t.Fatalf("delete: %s %s", answers[22].Header.Type, errFrame(answers[22]))
	}

	// Gone: describe, acks of its claims, a second delete; its keys, its
	// metrics series and its line in the list. The neighbour is untouched.
	wantErrCode(t, c.call(30, wire.AppendDescribeGroup(nil, 30, wire.DescribeGroup{Name: jobs, Group: "work"})), wire.CodeGroupNotFound)
	wantErrCode(t, c.call(31, wire.AppendGroupAck(nil, 31, false, wire.GroupAck{Name: jobs, Group: "work", Offsets: []uint64{1}})), wire.CodeGroupNotFound)
	wantErrCode(t, c.call(32, wire.AppendDeleteGroup(nil, 32, wire.DeleteGroup{Name: jobs, Group: "work"})), wire.CodeGroupNotFound)
	if got := storedGroups(t, n); got["work"] != 0 || got["keep"] == 0 {
		t.Fatalf("stored group keys after the delete: %v", got)
	}
	series := scrapeSeries(t, n)
	if _, ok := series[`herald_group_lag{group="work",stream="acme/shop/jobs"}`]; ok {
		t.Fatal("the deleted group's herald_group_lag is still exported")
	}
	if _, ok := series[`herald_group_lag{group="keep",stream="acme/shop/jobs"}`]; !ok {
		t.Fatal("the neighbour's herald_group_lag went too")
	}
	if l := c.listGroups(33, jobs); len(l) != 1 || l[0].Group != "keep" {
		t.Fatalf("list after the delete: %+v", l)
	}
	if info := c.describeGroup(34, "keep"); info.Shards[0].Committed != 1 || info.Shards[0].Claims != 1 {
		t.Fatalf("the neighbour after the delete: %+v", info.Shards[0])
	}

	// The name again: a new group at the first record, every record on
	// its first attempt. Its member joins at the same generation the old
	// one did, and the old group's cursor is still not its.
	if got := c.pollOffsets(40, "work", 0, 2); !slices.Equal(got, [][2]uint64{{0, 1}, {1, 1}}) {
		t.Fatalf("the new group polled %v", got)
	}
	s, a = joinRaw(t, c, 41, "work", "m1", 2)
	if a.Generation != 1 {
		t.Fatalf("the new group's first join: generation %d", a.Generation)
	}
	c.write(s, wire.AppendGroupStreamAck(nil, 42, wire.GroupStreamAck{Cursor: old.Cursor, Count: uint32(len(old.Records))}))
	wantErrCode(t, readUntil(t, c, s, 42), wire.CodeInvalidCursor)
	leave(s)
	c.waitMembers("work", 0)

	// Delete it again with records claimed by pull consumers (allowed),
	// with a poll right behind the delete: it waits for the delete, then
	// starts the group afresh (it is not served by the old group).
	c.write(c.control, wire.AppendDeleteGroup(nil, 50, wire.DeleteGroup{Name: jobs, Group: "work"}))
	c.write(c.control, wire.AppendGroupPoll(nil, 51, wire.GroupPoll{Name: jobs, Group: "work", Max: 10}))
	answers = map[uint64]wire.Frame{}
	for len(answers) < 2 {
		f := c.read(c.control)
		answers[f.Header.RequestID] = f
	}
	if answers[50].Header.Type != wire.TypeOK {
		t.Fatalf("second delete: %s %s", answers[50].Header.Type, errFrame(answers[50]))
	}
	if g := decodeRecords(t, answers[51]); len(g.Records) != 4 || g.Records[0].Offset != 0 || g.Records[0].Attempts != 1 || g.Records[2].Attempts != 1 {
		t.Fatalf("the poll behind the delete: %+v", g.Records)
	}
	// And once more, then restart: it stays deleted, the neighbour stays.
	if f := c.call(52, wire.AppendDeleteGroup(nil, 52, wire.DeleteGroup{Name: jobs, Group: "work"})); f.Header.Type != wire.TypeOK {
		t.Fatalf("third delete: %s %s", f.Header.Type, errFrame(f))
	}
	sCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(sCtx); err != nil {
		t.Fatal(err)
	}
	n = testNode(t, dir)
	c = dialRaw(t, n)
	wantErrCode(t, c.call(60, wire.AppendDescribeGroup(nil, 60, wire.DescribeGroup{Name: jobs, Group: "work"})), wire.CodeGroupNotFound)
	if l := c.listGroups(61, jobs); len(l) != 1 || l[0].Group != "keep" {
		t.Fatalf("list after a restart: %+v", l)
	}
	if got := storedGroups(t, n); got["work"] != 0 || got["keep"] == 0 {
		t.Fatalf("stored group keys after a restart: %v", got)
	}
	if got := c.pollOffsets(62, "work", 0, 10); len(got) != 4 || got[0] != [2]uint64{0, 1} {
		t.Fatalf("after a restart the name starts afresh: %v", got)
	}
	if info := c.describeGroup(63, "keep"); info.Shards[0].Committed != 1 {
		t.Fatalf("the neighbour after a restart: %+v", info.Shards[0])
	}
}

// A seek is refused while records are claimed or a member is joined;
// otherwise it moves the position (clamped to the retained range), keeps
// the dead letters below it and drops those at or after it, delivers
// everything from it on afresh, and survives a restart. To a time, every
// shard goes where OffsetsForTime says. A seek of a group never used
// creates it there.
func TestGroupSeek(t *testing.T) {
	const t0 = int64(1_800_000_000_000_000_000)
	clk := &stampClock{}
	dir := t.TempDir()
	start := func() *Node {
		return testNode(t, dir, withStampClock(clk), func(c *Config, _ *Options) { c.GroupMaxAttempts = 1 })
	}
	n := start()
	c := dialRaw(t, n)
	c.createDurable(jobs, 2)
	for i := range 10 { // shard 0: one record a second from t0
		c.publishAt(clk, t0+int64(i)*int64(time.Second), jobs, 0, 1)
	}
	for i := range 4 { // shard 1: one record every ten seconds from t0
		c.publishAt(clk, t0+int64(i)*int64(10*time.Second), jobs, 1, 1)
	}

	if got := c.pollOffsets(1, "g", 0, 6); len(got) != 6 {
		t.Fatalf("polled %v", got)
	}
	f := c.seek(2, wire.GroupSeek{Group: "g", Shard: 0, To: wire.SeekToOffset, Offset: 4})
	wantErrCode(t, f, wire.CodeGroupInUse)
	if e, _ := wire.DecodeError(f.Body); !bytes.Contains([]byte(e.Message), []byte("claimed")) {
		t.Fatalf("the refusal does not say why: %v", e)
	}
	// Shard 1 holds no claim: it may move while shard 0's are out.
	if got := c.seekOK(3, wire.GroupSeek{Group: "g", Shard: 1, To: wire.SeekToOffset, Offset: 2}); !slices.Equal(got, []wire.ShardOffset{{Shard: 1, Offset: 2}}) {
		t.Fatalf("seek of shard 1: %+v", got)
	}
	c.ack(4, "g", 0, false, 0, 1, 2, 4)
	c.ack(5, "g", 0, true, 3, 5) // max attempts 1: dead letters 3 and 5
	if info := c.describeGroup(6, "g"); info.Shards[0].Committed != 6 || info.Shards[0].DeadLetters != 2 {
		t.Fatalf("before the seek: %+v", info.Shards[0])
	}

	// Back to 4: dead letter 3 stays, 5 goes; 4.. come again, first attempt.
	if got := c.seekOK(7, wire.GroupSeek{Group: "g", Shard: 0, To: wire.SeekToOffset, Offset: 4}); !slices.Equal(got, []wire.ShardOffset{{Shard: 0, Offset: 4}}) {
		t.Fatalf("seek back: %+v", got)
	}
	checkSeeked := func(c *rawConn, when string) {
		t.Helper()
		info := c.describeGroup(8, "g")
		if sh := info.Shards[0]; sh.Committed != 4 || sh.Delivered != 4 || sh.Owed != 0 || sh.Claims != 0 || sh.DeadLetters != 1 {
			t.Fatalf("%s: shard 0 %+v", when, sh)
		}
		if sh := info.Shards[1]; sh.Committed != 2 || sh.Delivered != 2 {
			t.Fatalf("%s: shard 1 %+v", when, sh)
		}
		f := c.call(9, wire.AppendGroupDeadLetters(nil, 9, wire.GroupDeadLetters{Name: jobs, Group: "g", Shard: wire.AnyShard}))
		if dl, err := wire.DecodeGroupDeadList(f.Body); err != nil || len(dl.Letters) != 1 || dl.Letters[0].Offset != 3 {
			t.Fatalf("%s: dead letters %+v %v", when, dl, err)
		}
	}
	checkSeeked(c, "after the seek")
	sCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(sCtx); err != nil {
		t.Fatal(err)
	}
	n = start()
	c = dialRaw(t, n)
	checkSeeked(c, "after a restart")
	if got := c.pollOffsets(10, "g", 0, 10); !slices.Equal(got, [][2]uint64{{4, 1}, {5, 1}, {6, 1}, {7, 1}, {8, 1}, {9, 1}}) {
		t.Fatalf("after the seek and a restart polled %v", got)
	}
	c.ack(11, "g", 0, false, 4, 5, 6, 7, 8, 9)

	// To a time, every shard: shard 0 at its record stamped t0+3s, shard 1
	// at its first record at or after it (t0+10s).
	at := t0 + int64(3*time.Second)
	want := []wire.ShardOffset{{Shard: 0, Offset: 3}, {Shard: 1, Offset: 1}}
	if got := c.seekOK(12, wire.GroupSeek{Group: "g", Shard: wire.AnyShard, To: wire.SeekToTime, UnixNano: at}); !slices.Equal(got, want) {
		t.Fatalf("seek to t0+3s: %+v, want %+v", got, want)
	}
	if got := c.offsetsAt(13, jobs, wire.AnyShard, at); !slices.Equal(got, want) {
		t.Fatalf("offsets for t0+3s: %+v, want the seek's %+v", got, want)
	}
	if got := c.pollOffsets(14, "g", 1, 10); !slices.Equal(got, [][2]uint64{{1, 1}, {2, 1}, {3, 1}}) {
		t.Fatalf("shard 1 after the seek to a time: %v", got)
	}
	c.ack(15, "g", 1, false, 1, 2, 3)
	// Clamped: past the tail is the tail, 0 is the first retained record.
	if got := c.seekOK(16, wire.GroupSeek{Group: "g", Shard: wire.AnyShard, To: wire.SeekToOffset, Offset: wire.NoEnd}); !slices.Equal(got, []wire.ShardOffset{{Shard: 0, Offset: 10}, {Shard: 1, Offset: 4}}) {
		t.Fatalf("seek to the tail: %+v", got)
	}
	if got := c.seekOK(17, wire.GroupSeek{Group: "g", Shard: 1, To: wire.SeekToOffset, Offset: 0}); !slices.Equal(got, []wire.ShardOffset{{Shard: 1, Offset: 0}}) {
		t.Fatalf("seek to 0: %+v", got)
	}

	// A member refuses it; a shard past the count and an unknown kind are
	// refused too.
	s, _ := joinRaw(t, c, 18, "g", "m1", 1)
	f = c.seek(19, wire.GroupSeek{Group: "g", Shard: 0, To: wire.SeekToOffset})
	wantErrCode(t, f, wire.CodeGroupInUse)
	if e, _ := wire.DecodeError(f.Body); !bytes.Contains([]byte(e.Message), []byte("push members")) {
		t.Fatalf("the refusal does not say why: %v", e)
	}
	leave(s)
	wantErrCode(t, c.seek(20, wire.GroupSeek{Group: "g", Shard: 2}), wire.CodeInvalidShard)
	bad := wire.AppendGroupSeek(nil, 21, wire.GroupSeek{Name: jobs, Group: "g", Shard: 0})
	bad[len(bad)-9] = 7 // the seek kind
	wantErrCode(t, c.call(21, bad), wire.CodeInvalidRequest)

	// A group never used is created at the position.
	if got := c.seekOK(22, wire.GroupSeek{Group: "fresh", Shard: wire.AnyShard, To: wire.SeekToOffset, Offset: 5}); !slices.Equal(got, []wire.ShardOffset{{Shard: 0, Offset: 5}, {Shard: 1, Offset: 4}}) {
		t.Fatalf("seek of a new group: %+v", got)
	}
	if got := c.pollOffsets(23, "fresh", 0, 1); !slices.Equal(got, [][2]uint64{{5, 1}}) {
		t.Fatalf("the new group polled %v", got)
	}
}

// Who may do what: listing needs consume or manage, deleting manage,
// seeking consume; none reaches another tenant.
func TestGroupAdminPermissions(t *testing.T) {
	n := testNode(t, t.TempDir(), func(c *Config, _ *Options) { c.AuthTokensFile = writeTokens(t) })
	admin := dialRawToken(t, n, tokenAcme)
	admin.createDurable(jobs, 1)
	admin.publishN(jobs, 0, 2)
	admin.pollOffsets(1, "g", 0, 1)
	reader := dialRawToken(t, n, tokenAcmeRead) // subscribe, consume
	pub := dialRawToken(t, n, tokenShopPub)     // publish
	if l := reader.listGroups(2, jobs); len(l) != 1 || l[0].Group != "g" {
		t.Fatalf("reader's list: %+v", l)
	}
	wantErrCode(t, pub.call(3, wire.AppendListGroups(nil, 3, jobs)), wire.CodePermissionDenied)
	if got := reader.seekOK(4, wire.GroupSeek{Group: "other", Shard: 0, To: wire.SeekToOffset, Offset: 1}); got[0].Offset != 1 {
		t.Fatalf("reader's seek: %+v", got)
	}
	wantErrCode(t, pub.seek(5, wire.GroupSeek{Group: "g", Shard: 0}), wire.CodePermissionDenied)
	wantErrCode(t, reader.call(6, wire.AppendDeleteGroup(nil, 6, wire.DeleteGroup{Name: jobs, Group: "other"})), wire.CodePermissionDenied)
	if f := admin.call(7, wire.AppendDeleteGroup(nil, 7, wire.DeleteGroup{Name: jobs, Group: "other"})); f.Header.Type != wire.TypeOK {
		t.Fatalf("admin's delete: %s %s", f.Header.Type, errFrame(f))
	}
	globex := wire.StreamName{Tenant: "globex", Namespace: "shop", Stream: "jobs"}
	wantErrCode(t, admin.call(8, wire.AppendListGroups(nil, 8, globex)), wire.CodePermissionDenied)
	wantErrCode(t, admin.call(9, wire.AppendDeleteGroup(nil, 9, wire.DeleteGroup{Name: globex, Group: "g"})), wire.CodePermissionDenied)
	wantErrCode(t, admin.seek(10, wire.GroupSeek{Name: globex, Group: "g"}), wire.CodePermissionDenied)
}
