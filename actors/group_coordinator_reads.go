package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// How the group coordinator hands out work. serve picks records for each
// waiting poll and hungry member (groupCore.candidates), and reads them
// from the log in a goroutine it owns; picksRead brings them back, and only
// then are they claimed (groupCore.takeRead checks each pick is still
// there to take: a record acked or dead-lettered meanwhile is not). A shard
// is read for one consumer at a time (busy), so two reads never pick the
// same record, and the picks of reads in flight count against the group's
// in-flight bound (reserved).

// groupRead is a log read in flight for one poll or one member's claim.
type groupRead struct {
	// poller is the poll read for, or member and epoch the member.
	poller *groupPoller
	member string
	epoch  uint64
	max    int
	picks  []pick
	shards []uint32
	// trace is the trace of the message that started the read.
	trace string
}

// picksRead brings a read's records back to the coordinator.
type picksRead struct {
	token, id uint64
	recs      []wire.GroupRecord
	// used is how many picks (a prefix) recs cover; gone are those the log
	// no longer holds (deleted by retention).
	used int
	gone map[pick]bool
	// last is what the read's last log read returned, for the cache.
	last readCache
	err  error
}

// readCache is what a coordinator's last log read returned: the batches of
// one shard from the one holding the first pick on. The next claims of that
// shard are mostly records of those batches, and are handed out from them
// at once, with no read and no goroutine. It holds at most
// readCacheMaxBytes of records. The batches are committed and never change;
// one deleted by retention since is still handed out, as if read before.
type readCache struct {
	key     storage.ShardKey
	batches []storage.Batch
	// at is where the last walk of these batches stopped, so that the next
	// claims, of the offsets after it, resume there rather than decode the
	// batch again from its first record (a batch holds up to 4096 records:
	// polls of 100 walked each one 40 times over).
	at walkPoint
}

// walkPoint is a record's place in a batch: the record at offset off
// starts pos bytes into the records of the batch based at base. The zero
// value is no place.
type walkPoint struct {
	base, off uint64
	pos       int
}

// readCacheMaxBytes bounds a coordinator's read cache.
const readCacheMaxBytes = 256 << 10

// errNotCached is a read the cache cannot serve.
var errNotCached = errors.New("group read cache: not cached")

// Read implements batchReader: the cached batches from the one holding
// from, or errNotCached.
func (c *readCache) Read(key storage.ShardKey, from uint64, _, _ int) ([]storage.Batch, error) {
	if key != c.key {
		return nil, errNotCached
	}
	for i, b := range c.batches {
		if b.Base <= from && from < b.End() {
			return c.batches[i:], nil
		}
	}
	return nil, errNotCached
}

// keep makes what a read returned the cache, if it is small enough.
func (c *readCache) keep(last readCache) {
	size := 0
	for _, b := range last.batches {
		size += len(b.Records)
	}
	if size > readCacheMaxBytes {
		last = readCache{}
	}
	*c = last
}

// cacheThenLog reads from cached batches while they hold the offset asked
// for, and from log past them. A read for picks that start in the cached
// batches and run past them then reads only the batches after them: the
// log read of a poll crossing a batch boundary read again the (up to
// 256 KiB) batch the earlier polls were served from.
type cacheThenLog struct {
	cache readCache
	log   batchReader
}

// Read implements batchReader.
func (r cacheThenLog) Read(key storage.ShardKey, from uint64, maxBatches, maxBytes int) ([]storage.Batch, error) {
	if b, err := r.cache.Read(key, from, maxBatches, maxBytes); err == nil {
		return b, nil
	}
	return r.log.Read(key, from, maxBatches, maxBytes)
}

// batchReader is where readPicks reads batches: the stream's log (in a
// goroutine), or the coordinator's read cache (in Receive: it does no I/O).
type batchReader interface {
	Read(shard storage.ShardKey, from uint64, maxBatches, maxBytes int) ([]storage.Batch, error)
}

// shardReader reads a stream's shards for its coordinator: from this
// node's log, or, for a cluster stream's shard this node holds no replica
// of, from the shard's replicas.
type shardReader struct {
	h      *StreamHandle
	remote *RemoteShards
}

// remoteReadTimeout bounds a read from a shard's replicas.
const remoteReadTimeout = 10 * time.Second

// Read implements batchReader.
func (r shardReader) Read(key storage.ShardKey, from uint64, maxBatches, maxBytes int) ([]storage.Batch, error) {
	if r.remote != nil && int(key.Shard) < len(r.h.Progress) {
		if reps := r.h.Progress[key.Shard].Remote.Load(); reps != nil {
			ctx, cancel := context.WithTimeout(context.Background(), remoteReadTimeout)
			defer cancel()
			return r.remote.Read(ctx, *reps, key, from, maxBytes)
		}
	}
	return r.h.Log.Read(key, from, maxBatches, maxBytes)
}

// serve hands work to whoever waits for it: polls first (in arrival order),
// then hungry members; polls whose wait is over are answered empty; and it
// watches the tails of shards someone still waits on.
func (g *groupCoordinator) serve(ctx actor.Context) {
	now := g.cfg.Now()
	kept := g.pollers[:0]
	for _, p := range g.pollers {
		switch {
		case g.busy[p.shard]:
			kept = append(kept, p) // a read of its shard is out: wait for it
		case g.core.claimable(p.shard) && g.startRead(ctx, &groupRead{poller: p, max: p.max}, []uint32{p.shard}):
			// being read for
		case !p.deadline.After(now):
			g.reply(ctx, p.replyTo, wire.AppendGroupRecords(nil, p.reqID, wire.GroupRecords{}))
			g.forgetPoller(ctx, p)
		default:
			kept = append(kept, p)
			g.watch(ctx, p.shard, false)
		}
	}
	clear(g.pollers[len(kept):])
	g.pollers = kept
	for id, max := range g.hungry {
		mem := g.core.members[id]
		if mem == nil {
			delete(g.hungry, id)
			continue
		}
		var shards []uint32
		for _, s := range mem.shards {
			switch {
			case g.busy[s]:
			case g.core.claimable(s):
				shards = append(shards, s)
			default:
				g.watch(ctx, s, false)
			}
		}
		if len(shards) > 0 && g.startRead(ctx, &groupRead{member: id, epoch: mem.epoch, max: max}, shards) {
			delete(g.hungry, id)
		}
	}
	if c := g.cache; c.batches != nil && !g.core.claimable(c.key.Shard) {
		// Everything read is handed out: the batches would only hold memory.
		g.cache = readCache{}
	}
}

// startRead picks up to r.max records of shards and reads them in a
// goroutine. It reports false if there was nothing to pick (or the group
// holds its maximum of claims).
func (g *groupCoordinator) startRead(ctx actor.Context, r *groupRead, shards []uint32) bool {
	room := g.cfg.Limits.MaxInFlight - g.core.claimCount - g.reserved
	if room <= 0 {
		return false
	}
	picks := g.core.candidates(shards, min(r.max, room))
	if len(picks) == 0 {
		return false
	}
	// A poll's answer carries no cursor; a push's cursor names its runs of
	// offsets, at most maxCursorRanges of them.
	budget, maxRanges := g.cfg.MaxFrameBytes-wire.GroupRecordsHeadSize(0), 0
	if r.poller == nil {
		budget, maxRanges = g.cfg.MaxFrameBytes-wire.GroupRecordsHeadSize(wire.MaxCursorBytes), maxCursorRanges
	}
	r.picks, r.trace = picks, currentTrace(ctx)
	h := g.cfg.Stream
	if recs, used, gone, last, err := readPicks(&g.cache, h, picks, budget, maxRanges); err == nil {
		// Every pick is in the batches read last: claim them now, and the
		// next claims resume the walk where this one stopped.
		g.cache.at = last.at
		return g.claimRead(ctx, r, recs, used, gone)
	}
	g.readSeq++
	id, token := g.readSeq, g.token
	// The cached batches are committed and never change: the goroutine
	// reads its copy of the cache while Receive goes on.
	src := cacheThenLog{cache: g.cache, log: shardReader{h: h, remote: g.cfg.Remote}}
	self, root := ctx.Self(), ctx.ActorSystem().Root
	if !g.cfg.Goroutines.Go(func() {
		recs, used, gone, last, err := readPicks(src, h, picks, budget, maxRanges)
		root.Send(self, &picksRead{token: token, id: id, recs: recs, used: used, gone: gone, last: last, err: err})
	}) {
		return false // the node is stopping
	}
	for _, p := range picks {
		if !g.busy[p.shard] {
			g.busy[p.shard] = true
			r.shards = append(r.shards, p.shard)
		}
	}
	g.reserved += len(picks)
	g.reads[id] = r
	return true
}

// onPicksRead claims what a read brought back for its poll or member, if
// they still want it, and sends it.
func (g *groupCoordinator) onPicksRead(ctx actor.Context, m *picksRead) {
	if m.token != g.token {
		return // a read of the failed instance before a restart
	}
	r := g.reads[m.id]
	if r == nil {
		return
	}
	delete(g.reads, m.id)
	for _, s := range r.shards {
		delete(g.busy, s)
	}
	g.reserved -= len(r.picks)
	p := r.poller
	if m.err == nil {
		g.cache.keep(m.last)
	}
	if errors.Is(m.err, errRemoteUnavailable) {
		// A shard held on other nodes whose replicas did not serve the read
		// in time: wait again, and read anew (no claim was made).
		g.log.Warn("group: reading records of a shard held on other nodes", slog.Any("error", m.err))
		if p != nil {
			if !p.dropped {
				g.pollers = slices.Insert(g.pollers, 0, p)
			}
		} else if g.member(r.member, r.epoch) != nil && g.memberPIDs[r.member] != nil {
			g.hungry[r.member] = r.max
		}
		return
	}
	if m.err != nil {
		g.log.Error("group: reading records to deliver", slog.Any("error", m.err))
		werr := wire.Errorf(wire.CodeStorageFailure, "reading the records to deliver failed: %v", m.err)
		if p != nil {
			if !p.dropped {
				g.replyErr(ctx, p.replyTo, p.reqID, werr)
				g.forgetPoller(ctx, p)
			}
		} else if pid := g.memberPIDs[r.member]; pid != nil && g.member(r.member, r.epoch) != nil {
			ctx.Send(pid, &GroupMemberEnded{Err: werr}) // it leaves, and its claims go back
		}
		return
	}
	if p != nil && p.dropped || p == nil && (g.member(r.member, r.epoch) == nil || g.memberPIDs[r.member] == nil) {
		return // it left while its records were read: claim nothing
	}
	if !g.claimRead(ctx, r, m.recs, m.used, m.gone) {
		// Nothing left to take (retention deleted the picks, or they were
		// settled while being read): wait again, and serve picks anew.
		if p != nil {
			g.pollers = slices.Insert(g.pollers, 0, p)
		} else {
			g.hungry[r.member] = r.max
		}
	}
}

// claimRead claims what a read brought back for its poll or member, and
// sends it; it reports false if nothing was left to claim.
func (g *groupCoordinator) claimRead(ctx actor.Context, r *groupRead, recs []wire.GroupRecord, used int, gone map[pick]bool) bool {
	p := r.poller
	owner := ""
	if p == nil {
		owner = r.member
	}
	now := g.cfg.Now()
	taken := g.core.takeRead(owner, r.picks[:used], gone, now)
	kept := recs[:0]
	i := 0
	for k, pk := range r.picks[:used] {
		if gone[pk] {
			continue
		}
		if taken[k] {
			rec := recs[i]
			rec.Attempts, _ = g.core.shards[pk.shard].offs.attemptsOf(pk.offset)
			kept = append(kept, rec)
		}
		i++
	}
	recs = kept
	if len(recs) == 0 {
		return false
	}
	g.cfg.Stats.add(&g.cfg.Stats.GroupDelivered, uint64(len(recs)))
	if p != nil {
		// The claims' state goes to storage with the next flush; the answer
		// does not wait for it (attempts may undercount by one across a
		// crash).
		g.reply(ctx, p.replyTo, wire.AppendGroupRecords(nil, p.reqID, wire.GroupRecords{Records: recs}))
		g.forgetPoller(ctx, p)
		return true
	}
	mem := g.core.members[r.member]
	mem.inFlight += uint32(len(recs))
	cursor := mintCursor(g.cfg.Secret, cursorToken{stream: g.cfg.Stream.ID, group: cursorGroup(g.cfg.Group, g.core.incarnation), epoch: r.epoch,
		ranges: cursorRanges(recs)})
	ctx.Send(g.memberPIDs[r.member], &GroupClaimGranted{Records: recs, Cursor: cursor, Trace: r.trace})
	return true
}

// readPicksBatches is how many batches readPicks asks the log for at once.
const readPicksBatches = 8

// readPicks reads the picked records of h's shards from src, in pick
// order, until budget bytes and (if set) maxRanges runs of consecutive
// offsets. It returns the records, how many picks they cover (a prefix),
// which of those picks the log no longer holds, and what its last read
// returned. Picks of one shard come in offset order, so one pass over the
// shard's batches serves them all: a batch is read once and its records
// are walked once, however scattered the picks. It touches nothing but src:
// the coordinator runs it in a goroutine over the log, or in Receive over
// its read cache.
func readPicks(src batchReader, h *StreamHandle, picks []pick, budget, maxRanges int) ([]wire.GroupRecord, int, map[pick]bool, readCache, error) {
	var last readCache
	recs, used, gone, err := readPicksFrom(src, h, picks, budget, maxRanges, &last)
	return recs, used, gone, last, err
}

func readPicksFrom(src batchReader, h *StreamHandle, picks []pick, budget, maxRanges int, last *readCache) ([]wire.GroupRecord, int, map[pick]bool, error) {
	var resume walkPoint
	switch c := src.(type) {
	case *readCache:
		resume = c.at
	case cacheThenLog:
		resume = c.cache.at
	}
	out := make([]wire.GroupRecord, 0, len(picks))
	gone := map[pick]bool{}
	size, ranges := 0, 0
	var (
		shard   uint32
		batches []storage.Batch // read, not yet passed
		it      *wire.RecordIter
		itOff   uint64 // the offset of the record it yields next
		itPos   int    // where in batches[0].Records it started
		rec     wire.Record
	)
	// mark notes in last where the walk stopped.
	mark := func() {
		if it != nil && len(batches) > 0 && it.Err() == nil {
			last.at = walkPoint{base: batches[0].Base, off: itOff, pos: itPos + it.Pos()}
		}
	}
	for k, pk := range picks {
		if k > 0 && pk.shard != shard || it != nil && pk.offset < itOff {
			// Another shard (whatever was read, or found gone, of the last
			// one), or (never, for sorted picks) going back.
			batches, it = nil, nil
		}
		shard = pk.shard
		// Drop batches wholly before the pick; read more when none is left.
		for len(batches) > 0 && batches[0].End() <= pk.offset {
			batches, it = batches[1:], nil
		}
		if len(batches) == 0 {
			var err error
			key := h.ShardKey(pk.shard)
			// At most what the cache keeps: a read of big batches (producer
			// batching stores up to 256 KiB in one) for a poll of a few
			// records reads one, and the next polls are served from it.
			batches, err = src.Read(key, pk.offset, readPicksBatches, min(budget-size+1, readCacheMaxBytes))
			if err != nil {
				return nil, 0, nil, err
			}
			*last = readCache{key: key, batches: batches}
			it = nil
		}
		if len(batches) == 0 || batches[0].Base > pk.offset {
			gone[pk] = true // deleted by retention
			continue
		}
		b := batches[0]
		if it == nil {
			it, itOff = wire.NewRecordIter(b.Records), b.Base
			itPos = 0
			if resume.off > b.Base && resume.base == b.Base && resume.off <= pk.offset && resume.pos <= len(b.Records) {
				it, itOff, itPos = wire.NewRecordIter(b.Records[resume.pos:]), resume.off, resume.pos
			}
		}
		found, recAt := false, 0
		for itOff <= pk.offset {
			at := it.Pos()
			if !it.Next(&rec) {
				break
			}
			itOff++
			found, recAt = itOff-1 == pk.offset, at
		}
		if err := it.Err(); err != nil {
			return nil, 0, nil, fmt.Errorf("shard %d batch %d: %w", pk.shard, b.Base, err)
		}
		if !found {
			return nil, 0, nil, fmt.Errorf("shard %d batch %d: offset %d missing from the batch", pk.shard, b.Base, pk.offset)
		}
		if n := len(out); n == 0 || out[n-1].Shard != pk.shard || out[n-1].Offset+1 != pk.offset {
			if maxRanges > 0 && ranges == maxRanges {
				mark()
				return out, k, gone, nil // the cursor would grow past its bound
			}
			ranges++
		}
		// The record's own bytes in the batch, not a copy: the answer or the
		// push that carries it is encoded at once, and batches read are
		// never written.
		r := wire.GroupRecord{Shard: pk.shard, Offset: pk.offset, Timestamp: b.Timestamp, Record: b.Records[itPos+recAt : itPos+it.Pos() : itPos+it.Pos()]}
		if size+wire.GroupRecordSize(&r) > budget && len(out) > 0 {
			mark()
			return out, k, gone, nil
		}
		size += wire.GroupRecordSize(&r)
		out = append(out, r)
	}
	mark()
	return out, len(picks), gone, nil
}

// watch asks shard for a notice when its tail moves past what the group
// knows, unless one is outstanding. Without force it only does so when the
// group has delivered everything up to the known tail.
func (g *groupCoordinator) watch(ctx actor.Context, shard uint32, force bool) {
	if g.watching[shard] {
		return
	}
	s := g.core.shards[shard]
	if !force && s.next < s.tail {
		return
	}
	g.watching[shard] = true
	ctx.Request(g.cfg.Stream.Shards[shard], &WatchTail{After: s.tail})
}
