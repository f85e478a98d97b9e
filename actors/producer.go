package actors

import (
	"encoding/binary"
	"errors"

	"github.com/heraldmq/herald/storage"
)

// producerMemory is how many recent batches the node remembers per
// idempotent producer and shard, to answer a re-send with its offsets.
const producerMemory = 16

// producerState is what a shard remembers of one idempotent producer.
type producerState struct {
	// id is the producer id.
	id uint64
	// lastSeq is the last sequence admitted (written or pending).
	lastSeq uint64
	// recent are the last admitted batches, oldest first.
	recent []producerBatch
}

// producerBatch is one admitted batch of a producer.
type producerBatch struct {
	seq, base uint64
	count     uint32
}

// find returns the remembered batch with sequence seq.
func (p *producerState) find(seq uint64) (producerBatch, bool) {
	for _, b := range p.recent {
		if b.seq == seq {
			return b, true
		}
	}
	return producerBatch{}, false
}

// admit records a new batch.
func (p *producerState) admit(b producerBatch) {
	p.lastSeq = b.seq
	p.recent = append(p.recent, b)
	if len(p.recent) > producerMemory {
		p.recent = append(p.recent[:0], p.recent[len(p.recent)-producerMemory:]...)
	}
}

// forgetFrom forgets the remembered batches that end past tail and reports
// whether there were any. Such batches were cut off the shard's log when its
// tail was recovered (a torn or corrupt last batch, see storage.BadgerLog):
// their offsets will be assigned again, and a re-send of them must be
// written again, not answered as a duplicate. The producer's last sequence
// goes back to the one before the first batch forgotten (a producer's
// admitted sequences on a shard are consecutive, in offset order).
func (p *producerState) forgetFrom(tail uint64) bool {
	for i, b := range p.recent {
		if b.base+uint64(b.count) > tail {
			p.lastSeq = b.seq - 1
			p.recent = p.recent[:i]
			return true
		}
	}
	return false
}

// ProducerPrefix is the metadata prefix under which a shard's idempotent
// producers are stored.
func ProducerPrefix(k storage.ShardKey) []byte {
	b := append([]byte(nil), "producer/"...)
	b = binary.BigEndian.AppendUint64(b, k.Stream)
	return binary.BigEndian.AppendUint32(b, k.Shard)
}

func producerKey(k storage.ShardKey, id uint64) []byte {
	return binary.BigEndian.AppendUint64(ProducerPrefix(k), id)
}

const producerStateVersion = 1

// encode returns the persisted form: version | id | lastSeq | n |
// n × (seq | base | count).
func (p *producerState) encode() []byte {
	b := make([]byte, 0, 1+8+8+1+len(p.recent)*20)
	b = append(b, producerStateVersion)
	b = binary.BigEndian.AppendUint64(b, p.id)
	b = binary.BigEndian.AppendUint64(b, p.lastSeq)
	b = append(b, byte(len(p.recent)))
	for _, r := range p.recent {
		b = binary.BigEndian.AppendUint64(b, r.seq)
		b = binary.BigEndian.AppendUint64(b, r.base)
		b = binary.BigEndian.AppendUint32(b, r.count)
	}
	return b
}

var errBadProducerState = errors.New("actors: malformed producer state")

func decodeProducerState(b []byte) (*producerState, error) {
	if len(b) < 18 || b[0] != producerStateVersion {
		return nil, errBadProducerState
	}
	p := &producerState{id: binary.BigEndian.Uint64(b[1:]), lastSeq: binary.BigEndian.Uint64(b[9:])}
	n := int(b[17])
	if n > producerMemory || len(b) != 18+20*n {
		return nil, errBadProducerState
	}
	for i := range n {
		o := 18 + 20*i
		p.recent = append(p.recent, producerBatch{
			seq:   binary.BigEndian.Uint64(b[o:]),
			base:  binary.BigEndian.Uint64(b[o+8:]),
			count: binary.BigEndian.Uint32(b[o+16:]),
		})
	}
	return p, nil
}
