package actors

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// Messages of the groups registry, the group coordinators and the push
// members. Every message is sent as a pointer.

// groupAddressed is a request the groups registry routes to the coordinator
// of (Stream, Group), spawning it if needed.
type groupAddressed interface {
	groupAddress() (*StreamHandle, string)
	// creates reports whether the request brings the group into being (a
	// poll or a join); others are answered group_not_found for a group that
	// has no state.
	creates() bool
}

// GroupTarget names a group and where its answer frame goes.
type GroupTarget struct {
	Stream *StreamHandle
	Group  string
	// ReplyTo is the lane that writes the answer frame; ReqID is its
	// request id.
	ReplyTo *actor.PID
	ReqID   uint64
}

func (t *GroupTarget) groupAddress() (*StreamHandle, string) { return t.Stream, t.Group }

// GroupPollRequest claims records of one shard; answered with a
// GroupRecords frame (or Error) written to ReplyTo.
type GroupPollRequest struct {
	GroupTarget
	Shard uint32
	Max   int
	Wait  time.Duration
}

func (*GroupPollRequest) creates() bool { return true }

// GroupAckRequest acks (or with Nack, nacks) records of one shard;
// answered with GroupDone once durable.
type GroupAckRequest struct {
	GroupTarget
	Shard   uint32
	Offsets []uint64
	Nack    bool
}

func (*GroupAckRequest) creates() bool { return false }

// GroupAcksRequest acks the records of several entries (a GroupAcks frame:
// the coalesced acks of a client's callers), each one shard's offsets, and
// each settled as a GroupAckRequest would be and answered on its own: one
// GroupAcksDone, once durable, with a count or an error per entry.
type GroupAcksRequest struct {
	GroupTarget
	Entries []wire.GroupAckEntry
}

func (*GroupAcksRequest) creates() bool { return false }

// GroupDeadLettersRequest lists dead letters; answered with GroupDeadList.
type GroupDeadLettersRequest struct {
	GroupTarget
	Shard uint32
	From  uint64
	Limit int
}

func (*GroupDeadLettersRequest) creates() bool { return false }

// GroupSelectRequest redrives (or with Discard, discards) dead letters;
// answered with GroupDone once durable.
type GroupSelectRequest struct {
	GroupTarget
	Shard   uint32
	Offsets []uint64
	Discard bool
}

func (*GroupSelectRequest) creates() bool { return false }

// GroupDescribeRequest asks for GroupInfo.
type GroupDescribeRequest struct {
	GroupTarget
}

func (*GroupDescribeRequest) creates() bool { return false }

// GroupSeekRequest sets the committed position of each of Shards to the
// offset at the same index of Offsets (clamped to the shard's retained
// range); answered with a ShardOffsets frame (the positions) once durable,
// or Error (group_in_use). A seek of a group never used creates it there.
type GroupSeekRequest struct {
	GroupTarget
	Shards  []uint32
	Offsets []uint64
}

func (*GroupSeekRequest) creates() bool { return true }

// GroupDeleteRequest deletes the group. The coordinator refuses it while
// the group has push members (group_in_use, and groupDeleteRefused to the
// registry); otherwise it sets accepted and stops, and the registry, once
// it has stopped, deletes the group's state through the storage writer and
// answers OK. Meanwhile the registry holds the group's other requests.
type GroupDeleteRequest struct {
	GroupTarget
	// accepted is set by the coordinator that takes the delete, just before
	// it stops itself; the registry reads it once that coordinator has
	// stopped (Terminated), to tell a delete taken from one lost with it.
	accepted atomic.Bool
}

func (*GroupDeleteRequest) creates() bool { return false }

// groupDeleteRefused tells the registry that a coordinator it forwarded a
// delete to refused it, or lost it (failed or restarted with it): the
// group's held requests go on. The coordinator has answered the client.
type groupDeleteRefused struct {
	req *GroupDeleteRequest
}

// GroupListRequest asks the groups registry for a stream's groups;
// answered with a GroupList frame (or Error) written to ReplyTo. Group is
// unused: it names no group.
type GroupListRequest struct {
	GroupTarget
}

// GroupJoinRequest joins a push member (the sender) to a group. Answered
// (ctx.Respond) with GroupJoinResponse.
type GroupJoinRequest struct {
	Stream     *StreamHandle
	Group      string
	Member     string
	Window     uint32
	MaxPerPush uint32
}

func (r *GroupJoinRequest) groupAddress() (*StreamHandle, string) { return r.Stream, r.Group }
func (*GroupJoinRequest) creates() bool                           { return true }

// GroupJoinResponse answers GroupJoinRequest: the member's epoch and
// shards, and the coordinator to talk to from now on.
type GroupJoinResponse struct {
	Err         *wire.Error
	Coordinator *actor.PID
	Epoch       uint64
	Generation  uint64
	Shards      []uint32
	Session     uint32 // milliseconds
}

// GroupClaimRequest asks the coordinator for up to Max records of the
// member's shards. The coordinator answers GroupClaimGranted as soon as it
// has any: at once, or later when work arrives. A member has at most one
// claim request outstanding, and sends none while its budget is zero.
type GroupClaimRequest struct {
	Member string
	Epoch  uint64
	Max    int
}

// GroupClaimGranted delivers claimed records and the cursor that acks them.
type GroupClaimGranted struct {
	Records []wire.GroupRecord
	Cursor  []byte
	// Trace is the trace of the message that set the coordinator reading
	// the records (a publish's, when its commit woke the group).
	Trace string
}

// GroupCommitRequest is a member's ack: the commit of every record Cursor
// names (Count of them), or with an empty Cursor a heartbeat. With Verify
// the member does not hold the cursor: the coordinator commits nothing and
// answers why the cursor returns no credit (forged, of an earlier
// membership, or acked already). The coordinator answers
// GroupCommitResponse once the commit is durable. InFlight is the member's
// records in flight when it sent the request (for DescribeGroup).
type GroupCommitRequest struct {
	Member   string
	Epoch    uint64
	Cursor   []byte
	Count    uint32
	Verify   bool
	ReqID    uint64
	Seq      uint64
	InFlight uint32
}

// GroupCommitResponse answers GroupCommitRequest (ReqID and Seq are the
// request's) with the member's current assignment, or the error that
// refused the commit. A nil Err means the commit is durable.
type GroupCommitResponse struct {
	ReqID      uint64
	Seq        uint64
	Err        *wire.Error
	Generation uint64
	Shards     []uint32
}

// GroupClaimsLapsed tells a push member that the visibility timeout
// released its last claims: every delivery it holds unacked is owed to the
// group again. A member whose window is full of them (and that commits
// nothing) would never be pushed again: it ends.
type GroupClaimsLapsed struct{}

// GroupMemberEnded tells a member actor that the coordinator removed it
// (session timeout) or is going away; it ends its stream with Err.
type GroupMemberEnded struct {
	Err *wire.Error
}

// GroupsStartAll tells the groups registry, at start, to start the
// coordinator of every group with state on the catalog's durable streams:
// each publishes its lag (herald_group_lag) from then on, consumed or not.
type GroupsStartAll struct {
	Catalog *actor.PID
}

// StreamGroupsDropped tells the groups registry that a stream was deleted:
// its coordinators stop. Answered with StreamGroupsDroppedResponse once
// they have, so the catalog deletes the group state after their last write.
type StreamGroupsDropped struct {
	Stream uint64
}

// StreamGroupsDroppedResponse answers StreamGroupsDropped.
type StreamGroupsDroppedResponse struct{}

// groupStreamDropped tells a coordinator, just before it is stopped, that
// its stream was deleted (so members and polls are told stream_not_found).
type groupStreamDropped struct{}

// memberGone is a coordinator's note to itself that a member's actor
// stopped, queued behind what the member sent before.
type memberGone struct{ who *actor.PID }

// GroupStateWrite asks shard 0 of a cluster stream to commit group state
// through its raft group (shard_groups.go): the puts of a coordinator's
// flush (none: a barrier, answered once everything proposed before has
// applied). Answered, to the sender, with MetaWriteResponse{Token} once
// durable on this replica, or with Err (a *wire.Error): not_leader when
// this replica does not lead, replication_timeout when the write may or
// may not commit.
type GroupStateWrite struct {
	Puts  []storage.MetaPut
	Token uint64
}

// GroupLeadership tells the groups registry that this node's replica of
// the cluster stream's shard 0 started or stopped leading: the stream's
// coordinators run on that leader only.
type GroupLeadership struct {
	Stream  uint64
	Name    wire.StreamName
	Leading bool
}

// groupLeadershipLost tells a coordinator, just before the registry stops
// it, that this node's replica of its cluster stream's shard 0 stopped
// leading: members and polls are told err (not_leader) as it stops.
type groupLeadershipLost struct{ err *wire.Error }

// groupTick is a coordinator's timer message.
type groupTick struct{ gen uint64 }
