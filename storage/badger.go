package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// BadgerOptions configures a BadgerLog. Start from DefaultBadgerOptions: a
// zero numeric field takes the DefaultBadgerOptions value, but a zero
// SyncWrites means no sync.
type BadgerOptions struct {
	// Dir is the directory of the database (keys and value log); required.
	Dir string
	// MemTableSize is the size of one memtable in bytes. A transaction may
	// hold at most 15% of it (Badger's limit), so it also bounds how much one
	// Commit writes atomically.
	MemTableSize int64
	// NumMemtables is how many memtables may be in memory (one mutable, the
	// rest waiting to be flushed).
	NumMemtables int
	// BlockCacheSize is the size of the block cache in bytes.
	BlockCacheSize int64
	// IndexCacheSize bounds the memory of table indexes and bloom filters in
	// bytes.
	IndexCacheSize int64
	// ValueLogFileSize is the size of one value log file in bytes; a single
	// value may not be larger.
	ValueLogFileSize int64
	// ValueThreshold is the value size in bytes from which values are kept in
	// the value log rather than in the LSM tree. The default (1024) sends
	// batch envelopes to the value log, which makes synced commits of many
	// batches much faster (LIBRARIES.md §5), while the small index entries
	// (17 bytes) stay in the LSM tree; keep it above 17.
	ValueThreshold int64
	// NumCompactors is the number of compaction goroutines.
	NumCompactors int
	// NumLevelZeroTables is the number of level-0 tables that triggers a
	// compaction.
	NumLevelZeroTables int
	// NumLevelZeroTablesStall is the number of level-0 tables at which writes
	// stall until compaction catches up.
	NumLevelZeroTablesStall int
	// BaseTableSize is the size of a table in the first level in bytes.
	BaseTableSize int64
	// SyncWrites makes every Commit sync before it returns. Without it a
	// commit is durable only after Sync.
	SyncWrites bool
	// ValueLogGCInterval is how often value-log garbage collection runs in
	// the background; 0 means every 5 minutes and a negative value disables
	// it.
	ValueLogGCInterval time.Duration
	// Logger receives Badger's warnings and errors (its info and debug
	// messages are dropped) and the log's own warnings, such as a truncated
	// tail. Nil discards them.
	Logger *slog.Logger
}

// Defaults of DefaultBadgerOptions: Badger's own defaults (64 MiB memtables,
// a 256 MiB block cache, 1 GiB value log files) are too large for a small
// machine (LIBRARIES.md §3).
//
// Value log files are 32 MiB, not 64: Badger writes the value log through a
// shared mapping, and on Linux (ext4 here) a sync of a mapped file costs
// more the more of it has been written: in a throwaway program appending
// 12 KiB at a time, the sync after each append took about 0.2 ms up to
// 25 MiB into the file and 2-2.7 ms past 50 MiB (msync of the mapping, of
// the written range, or fdatasync alike), while appends by pwrite synced in
// 0.2 ms at any offset. With 64 MiB files, a synced commit of one small
// batch took 1.27-1.67 ms on average over a file; with 32 MiB, 0.56-0.65 ms
// (BenchmarkBadgerCommitFileSize). A file must stay larger than the largest
// frame (16 MiB by default): Badger refuses a value larger than a file.
const (
	defaultMemTableSize            = 16 << 20
	defaultNumMemtables            = 2
	defaultBlockCacheSize          = 16 << 20
	defaultIndexCacheSize          = 16 << 20
	defaultValueLogFileSize        = 32 << 20
	defaultValueThreshold          = 1024
	defaultNumCompactors           = 2
	defaultNumLevelZeroTables      = 2
	defaultNumLevelZeroTablesStall = 8
	defaultBaseTableSize           = 4 << 20
	defaultValueLogGCInterval      = 5 * time.Minute
	// valueLogGCDiscardRatio is the fraction of a value log file that must be
	// garbage for GC to rewrite it.
	valueLogGCDiscardRatio = 0.5
)

// DefaultBadgerOptions returns options for a database in dir sized for a small
// machine (a few hundred MB of memory at most), with synced writes, batch
// values in the value log and no logger.
func DefaultBadgerOptions(dir string) BadgerOptions {
	return BadgerOptions{
		Dir:                     dir,
		MemTableSize:            defaultMemTableSize,
		NumMemtables:            defaultNumMemtables,
		BlockCacheSize:          defaultBlockCacheSize,
		IndexCacheSize:          defaultIndexCacheSize,
		ValueLogFileSize:        defaultValueLogFileSize,
		ValueThreshold:          defaultValueThreshold,
		NumCompactors:           defaultNumCompactors,
		NumLevelZeroTables:      defaultNumLevelZeroTables,
		NumLevelZeroTablesStall: defaultNumLevelZeroTablesStall,
		BaseTableSize:           defaultBaseTableSize,
		SyncWrites:              true,
		ValueLogGCInterval:      defaultValueLogGCInterval,
	}
}

// withDefaults returns o with every zero numeric field set to its default.
func (o BadgerOptions) withDefaults() BadgerOptions {
	d := DefaultBadgerOptions(o.Dir)
	setDefault(&o.MemTableSize, d.MemTableSize)
	setDefault(&o.NumMemtables, d.NumMemtables)
	setDefault(&o.BlockCacheSize, d.BlockCacheSize)
	setDefault(&o.IndexCacheSize, d.IndexCacheSize)
	setDefault(&o.ValueLogFileSize, d.ValueLogFileSize)
	setDefault(&o.ValueThreshold, d.ValueThreshold)
	setDefault(&o.NumCompactors, d.NumCompactors)
	setDefault(&o.NumLevelZeroTables, d.NumLevelZeroTables)
	setDefault(&o.NumLevelZeroTablesStall, d.NumLevelZeroTablesStall)
	setDefault(&o.BaseTableSize, d.BaseTableSize)
	setDefault(&o.ValueLogGCInterval, d.ValueLogGCInterval)
	return o
}

// setDefault sets *p to d when *p is zero.
func setDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// badgerOptions translates o (already defaulted) into Badger's options.
// Conflict detection is off (one writer, no read-modify-write transactions)
// and tables are not compressed (values, the bulk, live in the value log).
func (o BadgerOptions) badgerOptions() badger.Options {
	bo := badger.DefaultOptions(o.Dir).
		WithMemTableSize(o.MemTableSize).
		WithNumMemtables(o.NumMemtables).
		WithBlockCacheSize(o.BlockCacheSize).
		WithIndexCacheSize(o.IndexCacheSize).
		WithValueLogFileSize(o.ValueLogFileSize).
		WithValueThreshold(o.ValueThreshold).
		WithNumCompactors(o.NumCompactors).
		WithNumLevelZeroTables(o.NumLevelZeroTables).
		WithNumLevelZeroTablesStall(o.NumLevelZeroTablesStall).
		WithBaseTableSize(o.BaseTableSize).
		WithSyncWrites(o.SyncWrites).
		WithDetectConflicts(false).
		WithCompression(options.None).
		WithLogger(nil)
	if o.Logger != nil {
		bo = bo.WithLogger(badgerLogger{o.Logger})
	}
	return bo
}

// badgerLogger routes Badger's warnings and errors to a slog.Logger, with
// component=badger, and drops its info and debug messages. Its cache reports, which it logs as warnings once a minute
// while the block or index cache's hit ratio is low (as it is for a log
// read once, in order, on a healthy node), go at debug.
type badgerLogger struct {
	// l receives the messages.
	l *slog.Logger
}

// Errorf implements badger.Logger.
func (b badgerLogger) Errorf(format string, args ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(format, args...)), "component", "badger")
}

// Warningf implements badger.Logger.
func (b badgerLogger) Warningf(format string, args ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	if strings.HasPrefix(format, "%s might be too small. Metrics:") || strings.HasPrefix(format, "Cache life expectancy") {
		b.l.Debug(msg, "component", "badger")
		return
	}
	b.l.Warn(msg, "component", "badger")
}

// Infof implements badger.Logger; info messages are dropped.
func (badgerLogger) Infof(string, ...any) {}

// Debugf implements badger.Logger; debug messages are dropped.
func (badgerLogger) Debugf(string, ...any) {}

// BadgerLog is the durable Log, stored in a Badger database: a batch per key
// with its index entry beside it (see the package documentation) and
// metadata under its own prefix.
//
// Commit writes everything it is given in one Badger transaction, synced once
// when SyncWrites is set. If that is more than one transaction may hold
// (badger.ErrTxnTooBig: about 15% of MemTableSize, or as many entries), it is
// split into several transactions committed in order, appends first then
// metadata puts, each in the order given: atomicity is then per transaction
// (a batch and its index entry are always in the same one), and a failure
// part way leaves the earlier transactions written.
//
// Retention (DeleteBefore, Retain) walks only the batch index and deletes the
// oldest batches with their index entries, each pair in one transaction, in
// offset order, after raising the shard's floor: the offset below which
// everything is deleted, which keeps the tail of a shard left with no batch.
//
// Recovery: a torn or corrupt batch at the end of a shard's log (for example
// the last write before a crash) is truncated by Tail, which deletes it and
// its index entry with a synced write, logs a warning and reports the tail
// after the previous intact batch (or the shard's floor); such a batch is
// never served. A corrupt batch in the middle
// of a log is left in place and makes Read return ErrCorrupt when it reaches
// it.
//
// A database written before the batch index existed is indexed once by
// OpenBadger (which reads every batch then).
//
// A background goroutine owned by the log runs value-log garbage collection;
// Close stops it and waits for it.
//
// Lock order: mu (shared) before deletes.
type BadgerLog struct {
	// db is the database; safe for concurrent use, closed by Close.
	db *badger.DB
	// logger receives the log's warnings; never nil.
	logger *slog.Logger
	// syncWrites is BadgerOptions.SyncWrites: when false, writes that must be
	// durable at once (tail truncation) are followed by db.Sync.
	syncWrites bool
	// stop is closed by Close to stop the GC goroutine.
	stop chan struct{}
	// gcDone is waited for by Close: the GC goroutine has returned.
	gcDone sync.WaitGroup

	// mu guards closed. Every method holds it shared while it uses db; Close
	// takes it exclusively, so that db is closed only once no call uses it.
	mu struct {
		sync.RWMutex
		// closed is set by Close.
		closed bool
	}

	// deletes serializes the calls that delete batches other than by
	// Commit, and read and write floors: DeleteBefore, Retain, DropShard and
	// the truncation of a torn tail. Each decides what to delete from a
	// snapshot and must not race with another doing the same (a floor could
	// go down, or a dropped shard get a floor back). Commit does not take
	// it: it only adds batches past the tail, which these never touch.
	deletes sync.Mutex
}

// Compile-time check that BadgerLog implements Log.
var _ Log = (*BadgerLog)(nil)

// OpenBadger opens (or creates) the database in opts.Dir and starts its
// value-log GC goroutine. The caller must Close the log. A database that a
// crash left with empty log files is opened too (see emptyLogFiles).
func OpenBadger(opts BadgerOptions) (*BadgerLog, error) {
	if opts.Dir == "" {
		return nil, errors.New("storage: BadgerOptions.Dir is empty")
	}
	opts = opts.withDefaults()
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	empty, err := emptyLogFiles(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("storage: open badger in %s: %w", opts.Dir, err)
	}
	db, err := badger.Open(opts.badgerOptions())
	for i := 0; err != nil && i < len(empty); i++ {
		// See emptyLogFiles: each failed open has repaired one such file.
		logger.Warn("storage: opening again: a crash left empty log files", "files", empty, "err", err)
		db, err = badger.Open(opts.badgerOptions())
	}
	if err != nil {
		return nil, fmt.Errorf("storage: open badger in %s: %w", opts.Dir, err)
	}
	l := &BadgerLog{
		db:         db,
		logger:     logger,
		syncWrites: opts.SyncWrites,
		stop:       make(chan struct{}),
	}
	if err := l.upgrade(); err != nil {
		db.Close()
		return nil, fmt.Errorf("storage: open badger in %s: %w", opts.Dir, err)
	}
	if opts.ValueLogGCInterval > 0 {
		l.gcDone.Add(1)
		go l.runValueLogGC(opts.ValueLogGCInterval)
	}
	return l, nil
}

// emptyLogFiles returns the names of the empty write-ahead (.mem) and value
// log (.vlog) files in dir (none when dir does not exist yet).
//
// Badger creates such a file and only then gives it its size and header, so
// a crash in between (kill -9 while the node starts or rotates a memtable)
// leaves it empty, and Badger then refuses to open the database with "Create
// a new file" (badger#2207). The failed open has given the first such file
// its size and header by then, so opening again succeeds after at most one
// failure per empty file. OpenBadger does that rather than removing the
// files itself, so that nothing in dir changes unless Badger holds its
// directory lock. (A failed open may leave a few of Badger's goroutines
// behind: once per crash, in that window.)
func emptyLogFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var empty []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || (!strings.HasSuffix(name, ".mem") && !strings.HasSuffix(name, ".vlog")) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed since the listing
		}
		if info.Size() == 0 {
			empty = append(empty, name)
		}
	}
	return empty, nil
}

// runValueLogGC collects value-log garbage every interval until stop is
// closed.
func (l *BadgerLog) runValueLogGC(interval time.Duration) {
	defer l.gcDone.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			err := l.db.RunValueLogGC(valueLogGCDiscardRatio)
			if err == nil {
				continue // a file was rewritten: try the next one
			}
			if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
				l.logger.Warn("storage: value log GC failed", "err", err)
			}
			break
		}
	}
}

// acquire takes mu shared for one call, or returns ErrClosed. The caller must
// call l.mu.RUnlock when acquire succeeded.
func (l *BadgerLog) acquire() error {
	l.mu.RLock()
	if l.mu.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// validateAppends returns ErrInvalidBatch (wrapped) for the first batch with
// no records, or with more Records bytes than the index can record.
func validateAppends(appends []Append) error {
	for _, a := range appends {
		if a.Batch.Count == 0 || len(a.Batch.Records) == 0 || int64(len(a.Batch.Records)) > math.MaxUint32 {
			return fmt.Errorf("%w: stream %d shard %d base %d: %d records in %d bytes",
				ErrInvalidBatch, a.Shard.Stream, a.Shard.Shard, a.Batch.Base, a.Batch.Count, len(a.Batch.Records))
		}
	}
	return nil
}

// Commit writes appends (each batch with its index entry) then metas in one
// synced transaction, or in several in order when they do not fit in one (see
// BadgerLog). It refuses a batch with a zero Count or no Records bytes with
// ErrInvalidBatch before writing anything. Commit does not retain appends, metas or their slices after it
// returns.
func (l *BadgerLog) Commit(appends []Append, metas []MetaPut) error {
	if err := validateAppends(appends); err != nil {
		return err
	}
	if err := l.acquire(); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	if len(appends) == 0 && len(metas) == 0 {
		return nil
	}
	w := newSplitWriter(l.db)
	defer w.discard()
	for _, a := range appends {
		// Fresh keys and values per entry: Badger keeps them until the commit.
		// The batch, its index entry and its own metadata are one group.
		ops := []writeOp{
			setOp(batchKey(a.Shard, a.Batch.Base), encodeEnvelope(a.Batch)),
			setOp(indexKey(a.Shard, a.Batch.Base), encodeIndex(infoOf(a.Batch))),
		}
		for _, m := range a.Metas {
			ops = append(ops, metaOp(m))
		}
		err := w.write(ops...)
		if err != nil {
			return fmt.Errorf("storage: commit stream %d shard %d base %d: %w",
				a.Shard.Stream, a.Shard.Shard, a.Batch.Base, err)
		}
	}
	for _, m := range metas {
		if err := w.write(metaOp(m)); err != nil {
			return fmt.Errorf("storage: commit meta %q: %w", m.Key, err)
		}
	}
	if err := w.commit(); err != nil {
		return fmt.Errorf("storage: commit: %w", err)
	}
	return nil
}

// writeOp is one write of a splitWriter: a set, or a delete when del is set.
// Its slices are kept by Badger until the transaction commits.
type writeOp struct {
	// key is the key written.
	key []byte
	// value is the value set; unused by a delete.
	value []byte
	// del makes the write a delete of key.
	del bool
}

// setOp returns the write setting key to value.
func setOp(key, value []byte) writeOp { return writeOp{key: key, value: value} }

// metaOp returns the write of one metadata put (a delete for a nil value).
func metaOp(m MetaPut) writeOp {
	if m.Value == nil {
		return deleteOp(metaKey(m.Key))
	}
	return setOp(metaKey(m.Key), bytes.Clone(m.Value))
}

// deleteOp returns the write deleting key.
func deleteOp(key []byte) writeOp { return writeOp{key: key, del: true} }

// applyOps applies ops to txn, in order, until one fails.
func applyOps(txn *badger.Txn, ops []writeOp) error {
	for _, o := range ops {
		var err error
		if o.del {
			err = txn.Delete(o.key)
		} else {
			err = txn.SetEntry(badger.NewEntry(o.key, o.value))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// splitWriter writes groups of writes in as few transactions as Badger
// allows, each group whole in one transaction: when a group does not fit in
// the open transaction (badger.ErrTxnTooBig), that transaction, which may
// hold part of the group, is discarded, the earlier groups are written again
// into a new one and committed, and the group starts the next transaction.
// Transactions are committed in order.
type splitWriter struct {
	// db is the database written to.
	db *badger.DB
	// txn is the open transaction.
	txn *badger.Txn
	// ops are the writes of the groups in txn, kept to write them again.
	ops []writeOp
}

// newSplitWriter opens the first transaction.
func newSplitWriter(db *badger.DB) *splitWriter {
	return &splitWriter{db: db, txn: db.NewTransaction(true)}
}

// write adds group, writes that must be in the same transaction. A group too
// big for a transaction of its own returns badger.ErrTxnTooBig.
func (w *splitWriter) write(group ...writeOp) error {
	err := applyOps(w.txn, group)
	if errors.Is(err, badger.ErrTxnTooBig) && len(w.ops) > 0 {
		w.txn.Discard()
		w.txn = w.db.NewTransaction(true)
		// The same writes in the same order fit, as they did before.
		if err := applyOps(w.txn, w.ops); err != nil {
			return err
		}
		if err := w.commit(); err != nil {
			return err
		}
		w.txn = w.db.NewTransaction(true)
		err = applyOps(w.txn, group)
	}
	if err != nil {
		return err
	}
	w.ops = append(w.ops, group...)
	return nil
}

// commit commits the open transaction (syncing it when the database syncs
// writes). The writer must not be used afterwards except by discard or, in
// write, after a new transaction replaces it.
func (w *splitWriter) commit() error {
	w.ops = w.ops[:0]
	return w.txn.Commit()
}

// discard discards the open transaction; a no-op after commit.
func (w *splitWriter) discard() { w.txn.Discard() }

// writeDurably writes groups (see splitWriter) and returns once they are
// durable: synced by the commits when the database syncs writes, by db.Sync
// otherwise.
func (l *BadgerLog) writeDurably(groups [][]writeOp) error {
	w := newSplitWriter(l.db)
	defer w.discard()
	for _, g := range groups {
		if err := w.write(g...); err != nil {
			return err
		}
	}
	if err := w.commit(); err != nil {
		return err
	}
	if !l.syncWrites {
		return l.db.Sync()
	}
	return nil
}

// Tail returns the End of the shard's last intact batch, or the shard's
// floor (0 unless DeleteBefore raised it) when it has none. Corrupt batches at
// the end of the log are deleted with their index entries (synced) and a
// warning is logged: see BadgerLog.
func (l *BadgerLog) Tail(shard ShardKey) (uint64, error) {
	if err := l.acquire(); err != nil {
		return 0, err
	}
	defer l.mu.RUnlock()
	tail, torn, err := l.findTail(shard)
	if err == nil && len(torn) > 0 {
		// Truncate under deletes, after looking again: a concurrent deleter
		// may have removed some of the batches or raised the floor.
		l.deletes.Lock()
		defer l.deletes.Unlock()
		tail, torn, err = l.findTail(shard)
		if err == nil && len(torn) > 0 {
			err = l.truncateLocked(shard, torn)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("storage: tail of stream %d shard %d: %w", shard.Stream, shard.Shard, err)
	}
	return tail, nil
}

// tornBatch is a corrupt batch found at the end of a shard's log.
type tornBatch struct {
	// key is the batch's key.
	key []byte
	// err says why the batch is corrupt.
	err error
}

// findTail returns the shard's tail after its last intact batch (at least its
// floor) and the corrupt batches after that one, newest first. It reads the
// last batches' values to check them.
func (l *BadgerLog) findTail(shard ShardKey) (tail uint64, torn []tornBatch, err error) {
	prefix := shardPrefix(shard)
	err = l.db.View(func(txn *badger.Txn) error {
		floor, err := readFloor(txn, shard)
		if err != nil {
			return err
		}
		tail = floor
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		o.Reverse = true
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Seek(batchKey(shard, ^uint64(0))); it.ValidForPrefix(prefix); it.Next() {
			item := it.Item()
			b, err := readBatch(item)
			if errors.Is(err, ErrCorrupt) {
				torn = append(torn, tornBatch{key: item.KeyCopy(nil), err: err})
				continue
			}
			if err != nil {
				return err
			}
			tail = max(tail, b.End())
			return nil
		}
		return nil
	})
	return tail, torn, err
}

// truncateLocked deletes the corrupt batches at the end of a shard's log and
// their index entries, durably, and logs a warning for each. The caller holds
// deletes.
func (l *BadgerLog) truncateLocked(shard ShardKey, torn []tornBatch) error {
	groups := make([][]writeOp, len(torn))
	for i, t := range torn {
		groups[i] = []writeOp{deleteOp(t.key)}
		if base, err := batchKeyBase(t.key); err == nil {
			groups[i] = append(groups[i], deleteOp(indexKey(shard, base)))
		}
	}
	if err := l.writeDurably(groups); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	for _, t := range torn {
		base, _ := batchKeyBase(t.key)
		l.logger.Warn("storage: truncated corrupt batch at the tail of a shard log",
			"stream", shard.Stream, "shard", shard.Shard, "base", base, "err", t.err)
	}
	return nil
}

// readBatch decodes the batch stored in item into a fresh buffer.
func readBatch(item *badger.Item) (Batch, error) {
	base, err := batchKeyBase(item.Key())
	if err != nil {
		return Batch{}, err
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return Batch{}, err
	}
	return decodeEnvelope(base, v)
}

// First returns the base of the shard's first stored batch, or its floor
// (the tail of a shard with no batch: 0 unless DeleteBefore raised it) when it
// has none. It does not read the batch.
func (l *BadgerLog) First(shard ShardKey) (uint64, error) {
	if err := l.acquire(); err != nil {
		return 0, err
	}
	defer l.mu.RUnlock()
	var first uint64
	err := l.db.View(func(txn *badger.Txn) error {
		var err error
		first, err = firstOf(txn, shard)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("storage: first of stream %d shard %d: %w", shard.Stream, shard.Shard, err)
	}
	return first, nil
}

// valueSizeSlack covers the error of Badger's Item.ValueSize for a value in
// the value log: it estimates the entry header's length (a few varints).
const valueSizeSlack = 64

// Read implements Log.Read. A maxBatches or maxBytes of 0 or less means no
// such limit. The returned batches and their Records are freshly allocated
// and owned by the caller. A corrupt batch returns an error wrapping
// ErrCorrupt (no batches are returned with it).
func (l *BadgerLog) Read(shard ShardKey, from uint64, maxBatches int, maxBytes int) ([]Batch, error) {
	if err := l.acquire(); err != nil {
		return nil, err
	}
	defer l.mu.RUnlock()
	var out []Batch
	prefix := shardPrefix(shard)
	err := l.db.View(func(txn *badger.Txn) error {
		// The batch holding from is the last one whose base is <= from.
		start := prefix
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		o.Reverse = true
		o.PrefetchValues = false
		rit := txn.NewIterator(o)
		rit.Seek(batchKey(shard, from))
		if rit.ValidForPrefix(prefix) {
			start = rit.Item().KeyCopy(nil)
		}
		rit.Close()

		// No value prefetch: it copies each value into the iterator's
		// buffer in a goroutine of its own, and readBatch copies it again.
		// ValueCopy alone is one copy, straight from the memtable or the
		// value log's mapping.
		o = badger.DefaultIteratorOptions
		o.Prefix = prefix
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		size := 0
		for it.Seek(start); it.ValidForPrefix(prefix); it.Next() {
			if maxBytes > 0 && size >= maxBytes {
				return nil // no batch fits: do not read the next one
			}
			if len(out) > 0 && maxBytes > 0 && it.Item().ValueSize()-envelopeHeaderLen > int64(maxBytes-size+valueSizeSlack) {
				// Over the bound for certain: stop before copying its value
				// (a read of one 256 KiB batch copied the next one too).
				return nil
			}
			b, err := readBatch(it.Item())
			if err != nil {
				return err
			}
			if b.End() <= from {
				continue // the batch before from, when from is past it
			}
			if len(out) > 0 && maxBytes > 0 && size+len(b.Records) > maxBytes {
				return nil
			}
			out = append(out, b)
			size += len(b.Records)
			if maxBatches > 0 && len(out) >= maxBatches {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: read stream %d shard %d from %d: %w", shard.Stream, shard.Shard, from, err)
	}
	return out, nil
}

// GetMeta implements Log.GetMeta.
func (l *BadgerLog) GetMeta(key []byte) ([]byte, error) {
	if err := l.acquire(); err != nil {
		return nil, err
	}
	defer l.mu.RUnlock()
	var v []byte
	err := l.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaKey(key))
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("storage: meta %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("storage: meta %q: %w", key, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// ScanMeta implements Log.ScanMeta. fn runs inside a read transaction while
// the log is in use: it must not call the log (a concurrent Close would
// deadlock). An error fn returns stops the scan and is returned unchanged.
func (l *BadgerLog) ScanMeta(prefix []byte, fn func(key, value []byte) error) error {
	if err := l.acquire(); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	p := metaKey(prefix)
	var fnErr error
	err := l.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = p
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			item := it.Item()
			k := item.Key()[1:]
			if err := item.Value(func(v []byte) error {
				fnErr = fn(k, v)
				return fnErr
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("storage: scan meta %q: %w", prefix, err)
	}
	return nil
}

// ScanMetaKeys implements Log.ScanMetaKeys, under the same rules as
// ScanMeta for fn.
func (l *BadgerLog) ScanMetaKeys(prefix []byte, fn func(key []byte) ([]byte, error)) error {
	if err := l.acquire(); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	p := metaKey(prefix)
	var fnErr error
	err := l.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = p
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		it.Seek(p)
		for it.ValidForPrefix(p) {
			k := it.Item().Key()
			seek, err := fn(k[1:])
			if err != nil {
				fnErr = err
				return nil
			}
			if seek != nil && bytes.Compare(seek, k[1:]) > 0 {
				it.Seek(metaKey(seek))
			} else {
				it.Next()
			}
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("storage: scan meta keys %q: %w", prefix, err)
	}
	return nil
}

// DropShard deletes every batch of the shard, its index entries and its
// floor, durably, in as many transactions as needed (not atomically: a crash
// part way leaves a suffix of the log, which a second DropShard removes). It
// does not use badger's DropPrefix, which blocks all writes while it runs
// and would fail a concurrent Commit with badger.ErrBlockedWrites.
func (l *BadgerLog) DropShard(shard ShardKey) error {
	if err := l.acquire(); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	l.deletes.Lock()
	defer l.deletes.Unlock()
	var groups [][]writeOp
	err := l.db.View(func(txn *badger.Txn) error {
		bases, err := storedBases(txn, shard, 0, true)
		if err != nil {
			return err
		}
		groups = batchDeletes(shard, bases)
		if _, err := txn.Get(floorKey(shard)); err == nil {
			groups = append(groups, []writeOp{deleteOp(floorKey(shard))})
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		return nil
	})
	if err == nil && len(groups) > 0 {
		err = l.writeDurably(groups)
	}
	if err != nil {
		return fmt.Errorf("storage: drop stream %d shard %d: %w", shard.Stream, shard.Shard, err)
	}
	return nil
}

// Sync implements Log.Sync.
func (l *BadgerLog) Sync() error {
	if err := l.acquire(); err != nil {
		return err
	}
	defer l.mu.RUnlock()
	if err := l.db.Sync(); err != nil {
		return fmt.Errorf("storage: sync: %w", err)
	}
	return nil
}

// Close waits for calls in progress, stops the GC goroutine and closes the
// database. It is idempotent: later calls return nil.
func (l *BadgerLog) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.closed = true
	l.mu.Unlock()
	close(l.stop)
	l.gcDone.Wait()
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("storage: close badger: %w", err)
	}
	return nil
}
