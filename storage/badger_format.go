package storage

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// The layout version of a BadgerLog database is stored under formatKey as
// one byte. Version 1 (no key) stored batches without index entries; version
// 2 adds the batch index and floors.
const (
	// formatVersion is the layout version this build writes.
	formatVersion = 2
	// unversionedFormat is the version of a database without formatKey.
	unversionedFormat = 1
)

// formatKey is the key of the database's layout version; no other key starts
// with 'v'.
var formatKey = []byte{'v'}

// upgrade brings the database to formatVersion: for a version 1 database it
// writes the index entry of every intact batch that lacks one (reading every
// batch, once), then records the version, durably. Corrupt batches get no
// index entry: Tail truncates a torn tail and Read refuses the others. A
// database newer than this build is refused.
func (l *BadgerLog) upgrade() error {
	version := byte(unversionedFormat)
	err := l.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(formatKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return fmt.Errorf("%w: layout version of %d bytes", ErrCorrupt, len(v))
		}
		version = v[0]
		return nil
	})
	if err != nil {
		return fmt.Errorf("read layout version: %w", err)
	}
	switch {
	case version == formatVersion:
		return nil
	case version > formatVersion:
		return fmt.Errorf("storage: database layout version %d is newer than this build's %d", version, formatVersion)
	}

	var groups [][]writeOp
	skipped := 0
	err = l.db.View(func(txn *badger.Txn) error {
		prefix := []byte{recordPrefix}
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			item := it.Item()
			b, err := readBatch(item)
			if errors.Is(err, ErrCorrupt) {
				skipped++
				continue
			}
			if err != nil {
				return err
			}
			ik := append([]byte{indexPrefix}, item.Key()[1:]...)
			if _, err := txn.Get(ik); err == nil {
				continue
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			groups = append(groups, []writeOp{setOp(ik, encodeIndex(infoOf(b)))})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("index batches: %w", err)
	}
	indexed := len(groups)
	groups = append(groups, []writeOp{setOp(formatKey, []byte{formatVersion})})
	if err := l.writeDurably(groups); err != nil {
		return fmt.Errorf("index batches: %w", err)
	}
	if indexed > 0 || skipped > 0 {
		l.logger.Info("storage: indexed the batches of a database written before the batch index",
			"indexed", indexed, "corrupt", skipped)
	}
	return nil
}
