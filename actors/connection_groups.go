package actors

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// maxDeliveryOverhead is the most a delivery frame adds around a batch's
// records: a ReadResult's head and section header, or a group push of one
// record (its cursor of one range, the record's head).
var maxDeliveryOverhead = max(wire.SectionHeaderSize+readResultHead,
	wire.GroupRecordsHeadSize(cursorHead+cursorRange+cursorMACSize)+wire.GroupRecordSize(&wire.GroupRecord{}))

// groupRequest decodes a pull-side group request from the control stream
// and hands it to the group's coordinator, which answers on lane (so a poll
// that waits for work holds up no other request); answers counts it until
// then. A frame that cannot be decoded returns its error; a request the
// node refuses is answered at once.
func (cs *connSession) groupRequest(lane *actor.PID, answers *AnswerMeter, f wire.Frame) ([]byte, error) {
	id := f.Header.RequestID
	var name wire.StreamName
	var group string
	var msg groupAddressed
	perm := PermConsume
	var seek wire.GroupSeek
	target := func() GroupTarget { return GroupTarget{Group: group, ReplyTo: lane, ReqID: id} }
	switch f.Header.Type {
	case wire.TypeGroupPoll:
		req, err := wire.DecodeGroupPoll(f.Body)
		if err != nil {
			return nil, err
		}
		name, group = req.Name, req.Group
		msg = &GroupPollRequest{GroupTarget: target(), Shard: req.Shard, Max: int(min(req.Max, 1<<30)),
			Wait: time.Duration(req.WaitMillis) * time.Millisecond}
	case wire.TypeGroupAck, wire.TypeGroupNack:
		req, err := wire.DecodeGroupAck(f.Body)
		if err != nil {
			return nil, err
		}
		name, group = req.Name, req.Group
		msg = &GroupAckRequest{GroupTarget: target(), Shard: req.Shard, Offsets: req.Offsets, Nack: f.Header.Type == wire.TypeGroupNack}
	case wire.TypeGroupAcks:
		req, err := wire.DecodeGroupAcks(f.Body)
		if err != nil {
			return nil, err
		}
		name, group = req.Name, req.Group
		msg = &GroupAcksRequest{GroupTarget: target(), Entries: req.Entries}
	case wire.TypeGroupDeadLetters:
		req, err := wire.DecodeGroupDeadLetters(f.Body)
		if err != nil {
			return nil, err
		}
		name, group = req.Name, req.Group
		msg = &GroupDeadLettersRequest{GroupTarget: target(), Shard: req.Shard, From: req.From, Limit: int(min(req.Limit, 1<<30))}
	case wire.TypeGroupRedrive, wire.TypeGroupDiscard:
		req, err := wire.DecodeGroupSelect(f.Body)
		if err != nil {
			return nil, err
		}
		name, group = req.Name, req.Group
		msg = &GroupSelectRequest{GroupTarget: target(), Shard: req.Shard, Offsets: req.Offsets, Discard: f.Header.Type == wire.TypeGroupDiscard}
	case wire.TypeDescribeGroup:
		req, err := wire.DecodeDescribeGroup(f.Body)
		if err != nil {
			return nil, err
		}
		name, group = req.Name, req.Group
		msg = &GroupDescribeRequest{GroupTarget: target()}
	case wire.TypeListGroups:
		n, err := wire.DecodeListGroups(f.Body)
		if err != nil {
			return nil, err
		}
		return cs.listGroups(lane, answers, f, n), nil
	case wire.TypeDeleteGroup:
		req, err := wire.DecodeDeleteGroup(f.Body)
		if err != nil {
			return nil, err
		}
		name, group, perm = req.Name, req.Group, PermManage
		msg = &GroupDeleteRequest{GroupTarget: target()}
	case wire.TypeGroupSeek:
		req, err := wire.DecodeGroupSeek(f.Body)
		if err != nil {
			return nil, err
		}
		name, group, seek = req.Name, req.Group, req
		msg = &GroupSeekRequest{GroupTarget: target()}
	}
	if _, del := msg.(*GroupDeleteRequest); del && cs.draining.Load() {
		return wire.AppendError(nil, id, wire.Errorf(wire.CodeShuttingDown, "node is draining")), nil
	}
	h, werr := cs.groupStream0(name, group, perm)
	if werr != nil {
		return wire.AppendError(nil, id, werr), nil
	}
	if node, relay := cs.groupRoute(h); relay {
		answers.Dispatch()
		cs.relayRequest(node, lane, f, h.ID)
		return nil, nil
	}
	switch m := msg.(type) {
	case *GroupPollRequest:
		m.Stream = h
	case *GroupAckRequest:
		m.Stream = h
	case *GroupAcksRequest:
		m.Stream = h
	case *GroupDeadLettersRequest:
		m.Stream = h
	case *GroupSelectRequest:
		m.Stream = h
	case *GroupDescribeRequest:
		m.Stream = h
	case *GroupDeleteRequest:
		m.Stream = h
	case *GroupSeekRequest:
		m.Stream = h
		if m.Shards, m.Offsets, werr = cs.seekTargets(h, seek); werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
	}
	answers.Dispatch()
	cs.root.Send(cs.cfg.Groups, msg)
	return nil, nil
}

// seekTargets returns the shards a GroupSeek moves and the offset each
// goes to: the seek's offset for every one (the coordinator clamps it), or
// the first offset committed at or after the seek's time, found here as
// OffsetsForTime finds it (a read of the batch index, in this goroutine).
func (cs *connSession) seekTargets(h *StreamHandle, req wire.GroupSeek) ([]uint32, []uint64, *wire.Error) {
	shards, werr := shardsOf(h, req.Shard)
	if werr != nil {
		return nil, nil, werr
	}
	offsets := make([]uint64, len(shards))
	if req.To == wire.SeekToOffset {
		for i := range offsets {
			offsets[i] = req.Offset
		}
		return shards, offsets, nil
	}
	at, werr := cs.offsetsAt(h, shards, req.UnixNano)
	if werr != nil {
		return nil, nil, werr
	}
	for i, o := range at {
		offsets[i] = o.Offset
	}
	return shards, offsets, nil
}

// listGroups checks a ListGroups and has the groups registry answer it on
// lane.
func (cs *connSession) listGroups(lane *actor.PID, answers *AnswerMeter, f wire.Frame, name wire.StreamName) []byte {
	id := f.Header.RequestID
	h, werr := cs.groupsStream(name, PermConsume|PermManage, nil)
	if werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	answers.Dispatch()
	if node, relay := cs.groupRoute(h); relay {
		cs.relayRequest(node, lane, f, h.ID)
		return nil
	}
	cs.root.Send(cs.cfg.Groups, &GroupListRequest{GroupTarget: GroupTarget{Stream: h, ReplyTo: lane, ReqID: id}})
	return nil
}

// groupStream0 checks a group request's names and finds its stream, which
// must be durable; perm is what the request needs.
func (cs *connSession) groupStream0(name wire.StreamName, group string, perm Permission) (*StreamHandle, *wire.Error) {
	return cs.groupsStream(name, perm, func() *wire.Error {
		if err := wire.ValidateGroupName("group name", group); err != nil {
			return err.(*wire.Error)
		}
		return nil
	})
}

// groupsStream checks that groups are enabled, perm allowed on name and
// then check (a group name), and finds the stream, which must be durable.
func (cs *connSession) groupsStream(name wire.StreamName, perm Permission, check func() *wire.Error) (*StreamHandle, *wire.Error) {
	if cs.cfg.Groups == nil {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "consumer groups are not enabled on this node")
	}
	if werr := cs.allow(perm, name); werr != nil {
		return nil, werr
	}
	if check != nil {
		if werr := check(); werr != nil {
			return nil, werr
		}
	}
	h, werr := cs.lookup(&LookupStreamRequest{Name: name})
	if werr != nil {
		return nil, werr
	}
	if !h.Config.Durable {
		return nil, wire.Errorf(wire.CodeStreamNotDurable, "stream %s is ephemeral; consumer groups need a durable stream", h.Name)
	}
	return h, nil
}

// groupStream serves a group push stream: it starts the member actor, then
// reads the client's acks and hands them over until the client's side ends.
func (cs *connSession) groupStream(s *quic.Stream, f wire.Frame) error {
	req, err := wire.DecodeGroupSubscribe(f.Body)
	if err != nil {
		werr := wire.RequestError(err)
		if werr == nil {
			return err
		}
		refuseStream(s, f.Header.RequestID, werr)
		return nil
	}
	if !cs.draining.Load() {
		if h, werr := cs.groupStream0(req.Name, req.Group, PermConsume); werr == nil {
			if node, relay := cs.groupRoute(h); relay {
				return cs.relayMember(s, f, node, h.ID)
			}
		}
	}
	answers := NewAnswerMeter(answerBacklogBytes)
	pid, werr := cs.startGroupMember(s, f, req, answers)
	if werr != nil {
		refuseStream(s, f.Header.RequestID, werr)
		return nil
	}
	if pid == nil {
		return nil // the connection is ending
	}
	return cs.groupAcks(s, pid, answers)
}

// startGroupMember checks a GroupSubscribe (f, decoded as req) and has the
// actor start its push member on s. It returns the member, or why the
// stream is refused, or neither when the connection is ending.
func (cs *connSession) startGroupMember(s *quic.Stream, f wire.Frame, req wire.GroupSubscribe, answers *AnswerMeter) (*actor.PID, *wire.Error) {
	if cs.draining.Load() {
		return nil, wire.Errorf(wire.CodeShuttingDown, "node is draining")
	}
	h, werr := cs.groupStream0(req.Name, req.Group, PermConsume)
	if werr != nil {
		return nil, werr
	}
	member := req.Member
	if member == "" {
		// One member reading the whole stream: name it after this stream.
		var b [8]byte
		_, _ = rand.Read(b[:])
		member = "anon-" + hex.EncodeToString(b[:])
	} else if err := wire.ValidateGroupName("member id", member); err != nil {
		return nil, err.(*wire.Error)
	}
	if req.Window == 0 {
		return nil, wire.Errorf(wire.CodeInvalidRequest, "window must be at least 1")
	}
	maxPush := req.MaxPerPush
	if maxPush == 0 || maxPush > req.Window {
		maxPush = req.Window
	}
	reply, refused := make(chan *actor.PID, 1), make(chan *wire.Error, 1)
	cs.root.Send(cs.self, &openGroupMember{reply: reply, refused: refused, cfg: GroupMemberConfig{Groups: cs.cfg.Groups, Stream: h, Request: req,
		ReqID: f.Header.RequestID, Member: member, QUIC: quicSubStream{s}, Answers: answers, MaxPerPush: maxPush, Stats: cs.cfg.Stats}})
	select {
	case pid, ok := <-reply:
		if !ok {
			return nil, wire.Errorf(wire.CodeShuttingDown, "connection closing")
		}
		return pid, nil
	case werr := <-refused:
		return nil, werr
	case <-cs.ctx.Done():
		return nil, nil
	}
}

// groupAcks reads the client's acks on a group push stream and hands them
// to its member pid until the stream or the connection ends; then it tells
// the member. Only a framing error is returned.
func (cs *connSession) groupAcks(s *quic.Stream, pid *actor.PID, answers *AnswerMeter) error {
	for {
		// Every ack is answered: while the client does not read the
		// answers, its acks are not read either (pushes are bounded by
		// credit and do not count).
		if err := answers.Wait(cs.ctx); err != nil {
			cs.root.Send(pid, &memberStreamEnded{})
			return nil
		}
		f, err := wire.ReadFrame(s, cs.cfg.MaxFrameBytes)
		if err != nil {
			cs.root.Send(pid, &memberStreamEnded{})
			var we *wire.Error
			if errors.As(err, &we) {
				return err
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return nil // reset or connection gone: the member ends
		}
		if f.Header.Type != wire.TypeGroupStreamAck {
			cs.root.Send(pid, &memberStreamEnded{})
			return wire.Errorf(wire.CodeProtocolViolation, "%s frame on a group stream", f.Header.Type)
		}
		ack, err := wire.DecodeGroupStreamAck(f.Body)
		if err != nil {
			cs.root.Send(pid, &memberStreamEnded{})
			return err
		}
		cs.root.Send(pid, &memberAck{reqID: f.Header.RequestID, cursor: ack.Cursor, count: ack.Count})
	}
}
