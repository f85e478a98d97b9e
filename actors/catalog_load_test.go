package actors

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// Stream records are loaded only from under their own name's key, and no
// two may share an id: either would give one name or one id two handles.
func TestLoadStreamRecords(t *testing.T) {
	put := func(key string, id uint64, name wire.StreamName) storage.MetaPut {
		v, err := json.Marshal(storedFrom(id, name, wire.StreamConfig{Shards: 1, Durable: true}, 1))
		if err != nil {
			t.Fatal(err)
		}
		return storage.MetaPut{Key: append(append([]byte(nil), metaStreamPrefix...), key...), Value: v}
	}
	a := wire.StreamName{Tenant: "t", Namespace: "n", Stream: "a"}
	b := wire.StreamName{Tenant: "t", Namespace: "n", Stream: "b"}
	for _, tc := range []struct {
		name string
		puts []storage.MetaPut
		ok   bool
	}{
		{"two good records", []storage.MetaPut{put(nameKey(a), 1, a), put(nameKey(b), 2, b)}, true},
		{"a record under another name's key", []storage.MetaPut{put(nameKey(a), 1, a), put(nameKey(b), 2, a)}, false},
		{"one id twice", []storage.MetaPut{put(nameKey(a), 1, a), put(nameKey(b), 1, b)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := storage.NewMemoryLog(storage.MemoryOptions{})
			if err := log.Commit(nil, tc.puts); err != nil {
				t.Fatal(err)
			}
			got, err := loadStreamRecords(log.ScanMeta)
			if tc.ok {
				if err != nil || len(got) != len(tc.puts) {
					t.Fatalf("loaded %d records, %v", len(got), err)
				}
				return
			}
			if !errors.Is(err, errBadStreamRecord) || got != nil {
				t.Fatalf("loaded %d records, %v; want errBadStreamRecord", len(got), err)
			}
		})
	}
}
