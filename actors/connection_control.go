package actors

import (
	"errors"
	"fmt"
	"io"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/quic-go/quic-go"

	"github.com/heraldmq/herald/net/wire"
)

// controlLoop reads and serves the control stream's requests. It reads the
// next only while answers is within its limit: a client that does not read
// its answers is not read either.
func (cs *connSession) controlLoop(lane *actor.PID, control *quic.Stream, answers *AnswerMeter) error {
	for {
		if err := answers.Wait(cs.ctx); err != nil {
			return err
		}
		f, err := wire.ReadFrame(control, cs.cfg.MaxFrameBytes)
		if err != nil {
			if errors.Is(err, io.EOF) || cs.ctx.Err() != nil {
				return err
			}
			var werr *wire.Error
			if errors.As(err, &werr) {
				return cs.closeWith(err)
			}
			return err
		}
		resp, err := cs.controlRequest(lane, answers, f)
		if err != nil {
			werr := wire.RequestError(err)
			if werr == nil {
				return cs.closeWith(err)
			}
			// A well-framed request with a value the node does not
			// accept fails alone.
			resp = wire.AppendError(nil, f.Header.RequestID, werr)
		}
		if resp != nil { // nil: a group coordinator answers on the lane itself
			cs.root.Send(lane, &WriteFrame{Frame: resp})
		}
	}
}

// controlRequest answers one control frame. A frame that cannot be decoded
// returns its error: a framing error closes the connection, a request error
// is answered with an Error frame, as is a request the node refuses.
func (cs *connSession) controlRequest(lane *actor.PID, answers *AnswerMeter, f wire.Frame) ([]byte, error) {
	id := f.Header.RequestID
	switch f.Header.Type {
	case wire.TypeGroupPoll, wire.TypeGroupAck, wire.TypeGroupNack, wire.TypeGroupAcks, wire.TypeGroupDeadLetters,
		wire.TypeGroupRedrive, wire.TypeGroupDiscard, wire.TypeDescribeGroup,
		wire.TypeListGroups, wire.TypeDeleteGroup, wire.TypeGroupSeek:
		return cs.groupRequest(lane, answers, f)
	case wire.TypeOffsetsForTime:
		req, err := wire.DecodeOffsetsForTime(f.Body)
		if err != nil {
			return nil, err
		}
		return cs.offsetsForTime(id, req), nil
	case wire.TypeCreateStream:
		req, err := wire.DecodeCreateStream(f.Body)
		if err != nil {
			return nil, err
		}
		return cs.changeStream(id, req.Name, &CreateStreamRequest{Name: req.Name, Config: req.Config}), nil
	case wire.TypeDescribeStream:
		name, err := wire.DecodeDescribeStream(f.Body)
		if err != nil {
			return nil, err
		}
		// Publishers and subscribers describe the streams they use, so any
		// permission on the stream allows it.
		if werr := cs.allow(PermAll, name); werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
		h, werr := cs.lookup(&LookupStreamRequest{Name: name})
		if werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
		return wire.AppendStreamInfo(nil, id, cs.info(h)), nil
	case wire.TypeListStreams:
		req, err := wire.DecodeListStreams(f.Body)
		if err != nil {
			return nil, err
		}
		tenant, werr := cs.principal.AllowList(req.Tenant, req.Namespace)
		if werr != nil {
			cs.cfg.Stats.AuthDenied.Add(1)
			return wire.AppendError(nil, id, werr), nil
		}
		res, err := cs.root.RequestFuture(cs.cfg.Catalog, &ListStreamsRequest{Tenant: tenant, Namespace: req.Namespace}, cs.cfg.RequestTimeout).Result()
		if err != nil {
			return wire.AppendError(nil, id, wire.Errorf(wire.CodeInternal, "catalog: %v", err)), nil
		}
		list, _ := res.(*ListStreamsResponse)
		var infos []wire.StreamInfo
		if list != nil {
			for _, h := range list.Streams {
				if cs.principal.Sees(h.Name) {
					infos = append(infos, cs.info(h))
				}
			}
		}
		return wire.AppendStreamList(nil, id, infos), nil
	case wire.TypeDeleteStream:
		name, err := wire.DecodeDeleteStream(f.Body)
		if err != nil {
			return nil, err
		}
		if werr := cs.allow(PermManage, name); werr != nil {
			return wire.AppendError(nil, id, werr), nil
		}
		if cs.draining.Load() {
			return wire.AppendError(nil, id, wire.Errorf(wire.CodeShuttingDown, "node is draining")), nil
		}
		res, err := cs.root.RequestFuture(cs.cfg.Catalog, &DeleteStreamRequest{Name: name}, cs.cfg.RequestTimeout).Result()
		if err != nil {
			return wire.AppendError(nil, id, wire.Errorf(wire.CodeInternal, "catalog: %v", err)), nil
		}
		if r, ok := res.(*DeleteStreamResponse); ok && r.Err != nil {
			return wire.AppendError(nil, id, r.Err), nil
		}
		return wire.AppendOK(nil, id), nil
	case wire.TypeSetReplicas:
		req, err := wire.DecodeSetReplicas(f.Body)
		if err != nil {
			return nil, err
		}
		return cs.changeStream(id, req.Name, &SetReplicasRequest{Name: req.Name, Replicas: req.Replicas}), nil
	case wire.TypeClusterNodes:
		if err := wire.DecodeClusterNodes(f.Body); err != nil {
			return nil, err
		}
		if cs.cfg.ClusterNodes == nil {
			return wire.AppendError(nil, id, wire.Errorf(wire.CodeInvalidRequest, "this node is not in a cluster")), nil
		}
		return wire.AppendNodeList(nil, id, cs.cfg.ClusterNodes()), nil
	case wire.TypeRead:
		req, err := wire.DecodeRead(f.Body)
		if err != nil {
			return nil, err
		}
		return cs.read(id, req), nil
	default:
		return nil, wire.Errorf(wire.CodeProtocolViolation, "%s frame on the control stream", f.Header.Type)
	}
}

// readResultHead is a ReadResult body's size before its sections.
const readResultHead = 8 + 8 + 8 + 2

// read answers a range read: one page of committed records, from storage,
// never waiting and registering nothing with the shard.
func (cs *connSession) read(id uint64, req wire.Read) []byte {
	if werr := cs.allow(PermSubscribe, req.Name); werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	h, werr := cs.lookup(&LookupStreamRequest{Name: req.Name})
	if werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	if req.Shard >= uint32(len(h.Shards)) {
		return wire.AppendError(nil, id, wire.ShardOutOfRange(h.Name, uint64(req.Shard), len(h.Shards)))
	}
	// The tail a read reports is linearizable on a replicated shard: no
	// older than the read (shard_reads.go).
	res, err := cs.root.RequestFuture(h.Shards[req.Shard], &ShardInfoRequest{Linearizable: true, Replica: req.Replica}, cs.cfg.RequestTimeout).Result()
	if err != nil {
		return wire.AppendError(nil, id, wire.Errorf(wire.CodeInternal, "shard: %v", err))
	}
	info := res.(*ShardInfoResponse)
	switch {
	case info.Err != nil:
		return wire.AppendError(nil, id, info.Err)
	case req.Start > info.Tail:
		return wire.AppendError(nil, id, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: info.Tail,
			Message: fmt.Sprintf("offset %d is past the shard's tail %d", req.Start, info.Tail)})
	case req.Start < info.First:
		return wire.AppendError(nil, id, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: info.First,
			Message: fmt.Sprintf("offset %d is below the first retained offset %d", req.Start, info.First)})
	}
	maxRecords := uint64(cs.cfg.ReadMaxRecords)
	if req.MaxRecords > 0 {
		maxRecords = min(maxRecords, uint64(req.MaxRecords))
	}
	maxBytes := cs.cfg.ReadMaxBytes
	if req.MaxBytes > 0 {
		maxBytes = min(maxBytes, int(req.MaxBytes))
	}
	end := min(req.End, info.Tail, req.Start+maxRecords)
	if end <= req.Start {
		return wire.AppendReadResult(nil, id, req.Start, info.First, info.Tail, nil)
	}
	batches, err := h.Log.Read(h.ShardKey(req.Shard), req.Start, int(end-req.Start), maxBytes)
	if err != nil {
		return wire.AppendError(nil, id, wire.Errorf(wire.CodeStorageFailure, "reading shard %d: %v", req.Shard, err))
	}
	next := req.Start
	var secs []*wire.Section
	size := readResultHead
	for _, b := range batches {
		if b.Base >= end || len(secs) == wire.MaxSectionsPerFrame {
			break
		}
		if size += wire.SectionHeaderSize + len(b.Records); len(secs) > 0 && size > int(cs.cfg.MaxFrameBytes) {
			break // the page ends where the frame would
		}
		if h.Config.Durable && b.Base > next {
			// Retention deleted the page's start while we read.
			return wire.AppendError(nil, id, &wire.Error{Code: wire.CodeOffsetOutOfRange, Detail: b.Base,
				Message: fmt.Sprintf("offset %d was deleted by retention; the first retained offset is %d", next, b.Base)})
		}
		secs = append(secs, wire.NewSection(req.Shard, b.Base, b.Timestamp, b.Count, b.Records))
		next = min(b.End(), end)
	}
	return wire.AppendReadResult(nil, id, next, info.First, info.Tail, secs)
}

// lookup asks the catalog and waits (from a goroutine, never an actor).
func (cs *connSession) lookup(req any) (*StreamHandle, *wire.Error) {
	res, err := cs.root.RequestFuture(cs.cfg.Catalog, req, cs.cfg.RequestTimeout).Result()
	if err != nil {
		return nil, wire.Errorf(wire.CodeInternal, "catalog: %v", err)
	}
	r, ok := res.(*LookupStreamResponse)
	if !ok {
		return nil, wire.Errorf(wire.CodeInternal, "catalog answered %T", res)
	}
	if r.Err != nil {
		return nil, r.Err
	}
	return r.Stream, nil
}

// changeStream asks the catalog for a change of stream name (a create, a
// replica count), with the manage permission and not while draining, and
// answers the stream's info or the error.
func (cs *connSession) changeStream(id uint64, name wire.StreamName, req any) []byte {
	if werr := cs.allow(PermManage, name); werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	if cs.draining.Load() {
		return wire.AppendError(nil, id, wire.Errorf(wire.CodeShuttingDown, "node is draining"))
	}
	h, werr := cs.lookup(req)
	if werr != nil {
		return wire.AppendError(nil, id, werr)
	}
	return wire.AppendStreamInfo(nil, id, cs.info(h))
}

// info describes a stream with each shard's committed tail.
func (cs *connSession) info(h *StreamHandle) wire.StreamInfo {
	info := wire.StreamInfo{Name: h.Name, Config: h.Config, CreatedUnixNano: h.CreatedUnixNano, Tails: make([]uint64, len(h.Shards))}
	futures := make([]*actor.Future, len(h.Shards))
	for i, pid := range h.Shards {
		futures[i] = cs.root.RequestFuture(pid, &ShardInfoRequest{}, cs.cfg.RequestTimeout)
	}
	if h.Config.Replicas > 1 {
		info.Replication = make([]wire.ShardReplication, len(h.Shards))
	}
	for i, f := range futures {
		if res, err := f.Result(); err == nil {
			if r, ok := res.(*ShardInfoResponse); ok {
				info.Tails[i] = r.Tail
				if info.Replication != nil {
					info.Replication[i] = replicationOf(r, cs.features&wire.FeatureFollowerReads != 0)
				}
			}
		}
	}
	return info
}
