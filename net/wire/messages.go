package wire

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Feature bits announced in Hello and Welcome; a feature is used only when
// both sides announce it.
const (
	// FeaturePublishPipeline: acked publishes may be pipelined up to the
	// node's publish window per stream.
	FeaturePublishPipeline uint64 = 1 << 0
	// FeatureEventBatch: delivery uses binary EventBatch frames.
	FeatureEventBatch uint64 = 1 << 1
	// FeatureSubscribeQueue: a subscriber may ask for its own queue capacity.
	FeatureSubscribeQueue uint64 = 1 << 2
	// FeaturePublishConditional: conditional publishes (expected offset).
	FeaturePublishConditional uint64 = 1 << 3
	// FeatureIdempotentProducer: idempotent publishes (producer id, sequence).
	FeatureIdempotentProducer uint64 = 1 << 4
	// FeatureRead: range reads.
	FeatureRead uint64 = 1 << 5
	// FeatureGroups: consumer groups, pull and push (frames 0x40-0x4D).
	FeatureGroups uint64 = 1 << 6
	// FeatureOffsetsForTime: the first offset at or after a time
	// (OffsetsForTime, ShardOffsets: frames 0x18-0x19).
	FeatureOffsetsForTime uint64 = 1 << 7
	// FeatureGroupAdmin: list, delete and seek consumer groups (frames
	// 0x4E-0x51; a seek is answered with ShardOffsets).
	FeatureGroupAdmin uint64 = 1 << 8
	// FeatureListAllTenants: a ListStreams of tenant AllTenants lists every
	// tenant's streams (for credentials that may see every tenant).
	FeatureListAllTenants uint64 = 1 << 9
	// FeatureGroupAcks: several pull acks in one request, each answered on
	// its own (GroupAcks, GroupAcksDone: frames 0x52-0x53).
	FeatureGroupAcks uint64 = 1 << 10
	// FeatureFollowerReads: a Subscribe or Read may ask to be served by the
	// shard's leader (a trailing replica byte, ReplicaLeader), a replica
	// behind its leader refuses with CodeReplicaBehind, and a replicated
	// stream's StreamInfo gives each replica's lag in records and bytes.
	FeatureFollowerReads uint64 = 1 << 11
	// FeatureClusterNodes: a cluster node answers ClusterNodes with the
	// cluster's nodes and the client addresses they advertise (frames
	// 0x1B-0x1C).
	FeatureClusterNodes uint64 = 1 << 12
)

// Features is every feature this package's version implements.
const Features = FeaturePublishPipeline | FeatureEventBatch | FeatureSubscribeQueue |
	FeaturePublishConditional | FeatureIdempotentProducer | FeatureRead | FeatureGroups |
	FeatureOffsetsForTime | FeatureGroupAdmin | FeatureListAllTenants | FeatureGroupAcks | FeatureFollowerReads |
	FeatureClusterNodes

// StreamName names a stream: tenant, namespace and stream. Each part is 1–64
// bytes of [A-Za-z0-9._-].
type StreamName struct {
	Tenant, Namespace, Stream string
}

// String returns "tenant/namespace/stream".
func (n StreamName) String() string { return n.Tenant + "/" + n.Namespace + "/" + n.Stream }

// MaxNamePart is the longest tenant, namespace or stream name.
const MaxNamePart = 64

// Validate returns a CodeInvalidStreamName error if a part is empty, too long
// or holds a byte outside [A-Za-z0-9._-].
func (n StreamName) Validate() error {
	for _, p := range [...]struct{ what, v string }{{"tenant", n.Tenant}, {"namespace", n.Namespace}, {"stream", n.Stream}} {
		if p.v == "" || len(p.v) > MaxNamePart {
			return Errorf(CodeInvalidStreamName, "%s name must be 1-%d bytes, got %d", p.what, MaxNamePart, len(p.v))
		}
		for i := 0; i < len(p.v); i++ {
			c := p.v[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return Errorf(CodeInvalidStreamName, "%s name %q has a character outside [A-Za-z0-9._-]", p.what, p.v)
			}
		}
	}
	return nil
}

// ParseStreamName parses "stream", "namespace/stream" or
// "tenant/namespace/stream"; missing parts are "default".
func ParseStreamName(s string) (StreamName, error) {
	parts := strings.Split(s, "/")
	n := StreamName{Tenant: "default", Namespace: "default"}
	switch len(parts) {
	case 1:
		n.Stream = parts[0]
	case 2:
		n.Namespace, n.Stream = parts[0], parts[1]
	case 3:
		n.Tenant, n.Namespace, n.Stream = parts[0], parts[1], parts[2]
	default:
		return n, Errorf(CodeInvalidStreamName, "%q: want tenant/namespace/stream", s)
	}
	return n, n.Validate()
}

func appendName(dst []byte, n StreamName) []byte {
	for _, p := range [...]string{n.Tenant, n.Namespace, n.Stream} {
		dst = append(dst, byte(len(p)))
		dst = append(dst, p...)
	}
	return dst
}

func (d *decoder) name() StreamName {
	var parts [3]string
	for i := range parts {
		n := d.u8("stream name length")
		parts[i] = string(d.take(int(n), "stream name"))
	}
	return StreamName{Tenant: parts[0], Namespace: parts[1], Stream: parts[2]}
}

// Hello is the client's first frame on the control stream.
type Hello struct {
	Version  uint16
	Features uint64
	// MaxFrameBytes is the largest frame body the client accepts.
	MaxFrameBytes uint32
	// Token authenticates the client (empty in dev mode).
	Token string
	// ClientName is free text for logs.
	ClientName string
}

// AppendHello appends a Hello frame.
func AppendHello(dst []byte, reqID uint64, h Hello) []byte {
	dst, s := frameStart(dst, TypeHello, 0, reqID)
	dst = binary.BigEndian.AppendUint16(dst, h.Version)
	dst = binary.BigEndian.AppendUint64(dst, h.Features)
	dst = binary.BigEndian.AppendUint32(dst, h.MaxFrameBytes)
	dst = appendStr16(dst, h.Token)
	dst = appendStr16(dst, h.ClientName)
	return frameEnd(dst, s)
}

// DecodeHello decodes a Hello body.
func DecodeHello(body []byte) (Hello, error) {
	d := decoder{b: body}
	h := Hello{Version: d.u16("version"), Features: d.u64("features"), MaxFrameBytes: d.u32("max frame"),
		Token: d.str16("token"), ClientName: d.str16("client name")}
	return h, d.end("hello")
}

// Welcome is the node's answer to Hello.
type Welcome struct {
	Version  uint16
	Features uint64
	// MaxFrameBytes is the largest frame body the node accepts.
	MaxFrameBytes uint32
	// PublishWindow is how many acked publishes may be unanswered per stream.
	PublishWindow uint32
	// NodeID identifies the node for logs.
	NodeID string
}

// AppendWelcome appends a Welcome frame.
func AppendWelcome(dst []byte, reqID uint64, w Welcome) []byte {
	dst, s := frameStart(dst, TypeWelcome, 0, reqID)
	dst = binary.BigEndian.AppendUint16(dst, w.Version)
	dst = binary.BigEndian.AppendUint64(dst, w.Features)
	dst = binary.BigEndian.AppendUint32(dst, w.MaxFrameBytes)
	dst = binary.BigEndian.AppendUint32(dst, w.PublishWindow)
	dst = appendStr16(dst, w.NodeID)
	return frameEnd(dst, s)
}

// DecodeWelcome decodes a Welcome body.
func DecodeWelcome(body []byte) (Welcome, error) {
	d := decoder{b: body}
	w := Welcome{Version: d.u16("version"), Features: d.u64("features"), MaxFrameBytes: d.u32("max frame"),
		PublishWindow: d.u32("publish window"), NodeID: d.str16("node id")}
	return w, d.end("welcome")
}

// AppendError appends an Error frame answering request reqID (0: about the
// connection or stream as a whole).
func AppendError(dst []byte, reqID uint64, e *Error) []byte {
	dst, s := frameStart(dst, TypeError, 0, reqID)
	dst = binary.BigEndian.AppendUint16(dst, uint16(e.Code))
	dst = binary.BigEndian.AppendUint64(dst, e.Detail)
	msg := e.Message
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	dst = appendStr16(dst, msg)
	return frameEnd(dst, s)
}

// DecodeError decodes an Error body into an *Error.
func DecodeError(body []byte) (*Error, error) {
	d := decoder{b: body}
	e := &Error{Code: Code(d.u16("code")), Detail: d.u64("detail"), Message: d.str16("message")}
	if err := d.end("error"); err != nil {
		return nil, err
	}
	return e, nil
}

// AppendGoAway appends a GoAway frame: the node is draining.
func AppendGoAway(dst []byte, reason string) []byte {
	dst, s := frameStart(dst, TypeGoAway, 0, 0)
	dst = appendStr16(dst, reason)
	return frameEnd(dst, s)
}

// DecodeGoAway decodes a GoAway body and returns its reason.
func DecodeGoAway(body []byte) (string, error) {
	d := decoder{b: body}
	r := d.str16("reason")
	return r, d.end("goaway")
}

// Routing says how a keyed publish picks its shard.
type Routing uint8

// Routings. Both hash the key with 64-bit FNV-1a; unkeyed publishes go to
// shard 0.
const (
	// RoutingHash: shard = hash(key) % shards.
	RoutingHash Routing = 0
	// RoutingJump: shard = JumpHash(hash(key), shards) (jump consistent
	// hashing: growing the shard count moves the fewest keys).
	RoutingJump Routing = 1
)

// String returns "hash" or "jump".
func (r Routing) String() string {
	switch r {
	case RoutingHash:
		return "hash"
	case RoutingJump:
		return "jump"
	}
	return fmt.Sprintf("routing(%d)", uint8(r))
}

// Overflow is what a stream does for a subscriber whose queue is full when a
// live batch arrives.
type Overflow uint8

// Overflow policies.
const (
	// OverflowDropNew (the default): the arriving batch is not queued for
	// that subscriber. On a durable stream the subscription ends with
	// CodeLagged and the offset to resume from; on an ephemeral one the
	// subscriber sees an offset gap.
	OverflowDropNew Overflow = 0
	// OverflowDropOld: the oldest queued batch is evicted instead.
	OverflowDropOld Overflow = 1
	// OverflowBlock: the shard holds the batch until the subscriber has room.
	OverflowBlock Overflow = 2
)

// String returns the policy's config name.
func (o Overflow) String() string {
	switch o {
	case OverflowDropNew:
		return "drop_new"
	case OverflowDropOld:
		return "drop_old"
	case OverflowBlock:
		return "block"
	}
	return fmt.Sprintf("overflow(%d)", uint8(o))
}

// StreamConfig is a stream's configuration as it travels on the wire. Zero
// values of the queue bounds mean "the node's default"; zero retention means
// "keep forever".
type StreamConfig struct {
	// Shards is the number of shards, at least 1.
	Shards uint32
	// Durable streams are written to disk and survive restarts.
	Durable bool
	// Routing picks a keyed publish's shard.
	Routing Routing
	// Overflow is the policy for a subscriber whose queue is full.
	Overflow Overflow
	// QueueCapacity bounds a subscription's queue in batches (0: node default).
	QueueCapacity uint32
	// QueueMaxBytes bounds a subscription's queued records bytes (0: node default).
	QueueMaxBytes uint64
	// RetentionAgeMillis deletes whole batches older than this (0: forever).
	RetentionAgeMillis uint64
	// RetentionBytes deletes the oldest whole batches while a shard holds more
	// than this many records bytes (0: no bound).
	RetentionBytes uint64
	// Replicas is how many nodes of a cluster hold each shard (0 or 1: the
	// node the stream is created on alone). Encoded only when above 1.
	Replicas uint8
}

const (
	configFlagDurable    = 1 << 0
	configFlagReplicated = 1 << 1
)

// configSize is the encoded size of a StreamConfig.
const configSize = 4 + 1 + 1 + 1 + 4 + 8 + 8 + 8

func appendConfig(dst []byte, c StreamConfig) []byte {
	dst = binary.BigEndian.AppendUint32(dst, c.Shards)
	var f uint8
	if c.Durable {
		f |= configFlagDurable
	}
	if c.Replicas > 1 {
		f |= configFlagReplicated
	}
	dst = append(dst, f, byte(c.Routing), byte(c.Overflow))
	dst = binary.BigEndian.AppendUint32(dst, c.QueueCapacity)
	dst = binary.BigEndian.AppendUint64(dst, c.QueueMaxBytes)
	dst = binary.BigEndian.AppendUint64(dst, c.RetentionAgeMillis)
	dst = binary.BigEndian.AppendUint64(dst, c.RetentionBytes)
	if c.Replicas > 1 {
		dst = append(dst, c.Replicas)
	}
	return dst
}

func (d *decoder) config() StreamConfig {
	c := StreamConfig{Shards: d.u32("shards")}
	f := d.u8("config flags")
	if f&^(configFlagDurable|configFlagReplicated) != 0 {
		d.fail("unknown stream config flags 0x%02x", f)
	}
	c.Durable = f&configFlagDurable != 0
	c.Routing = Routing(d.u8("routing"))
	c.Overflow = Overflow(d.u8("overflow"))
	if d.err == nil && c.Routing > RoutingJump {
		d.fail("unknown routing %d", c.Routing)
	}
	if d.err == nil && c.Overflow > OverflowBlock {
		d.fail("unknown overflow policy %d", c.Overflow)
	}
	c.QueueCapacity = d.u32("queue capacity")
	c.QueueMaxBytes = d.u64("queue max bytes")
	c.RetentionAgeMillis = d.u64("retention age")
	c.RetentionBytes = d.u64("retention bytes")
	if f&configFlagReplicated != 0 {
		c.Replicas = d.u8("replicas")
		if d.err == nil && c.Replicas < 2 {
			d.fail("replicated stream config with %d replicas", c.Replicas)
		}
	}
	return c
}

// CreateStream asks the node to create a stream. Creating a stream that exists
// with the same config succeeds (and answers its StreamInfo); with another
// config it fails with CodeStreamExists.
type CreateStream struct {
	Name   StreamName
	Config StreamConfig
}

// AppendCreateStream appends a CreateStream frame.
func AppendCreateStream(dst []byte, reqID uint64, c CreateStream) []byte {
	dst, s := frameStart(dst, TypeCreateStream, 0, reqID)
	dst = appendName(dst, c.Name)
	dst = appendConfig(dst, c.Config)
	return frameEnd(dst, s)
}

// DecodeCreateStream decodes a CreateStream body.
func DecodeCreateStream(body []byte) (CreateStream, error) {
	d := decoder{b: body}
	c := CreateStream{Name: d.name(), Config: d.config()}
	return c, d.end("create_stream")
}

// AppendDescribeStream appends a DescribeStream frame.
func AppendDescribeStream(dst []byte, reqID uint64, name StreamName) []byte {
	dst, s := frameStart(dst, TypeDescribeStream, 0, reqID)
	dst = appendName(dst, name)
	return frameEnd(dst, s)
}

// DecodeDescribeStream decodes a DescribeStream body.
func DecodeDescribeStream(body []byte) (StreamName, error) {
	d := decoder{b: body}
	n := d.name()
	return n, d.end("describe_stream")
}

// ListStreams asks for the streams of a tenant, optionally one namespace.
type ListStreams struct {
	// Tenant is the tenant to list: empty for the credentials' own,
	// AllTenants for every tenant (FeatureListAllTenants).
	Tenant    string
	Namespace string // empty: every namespace
}

// AllTenants as ListStreams' tenant lists every tenant's streams. It is no
// valid tenant name, so it cannot name one.
const AllTenants = "*"

// AppendListStreams appends a ListStreams frame.
func AppendListStreams(dst []byte, reqID uint64, l ListStreams) []byte {
	dst, s := frameStart(dst, TypeListStreams, 0, reqID)
	dst = appendStr16(dst, l.Tenant)
	dst = appendStr16(dst, l.Namespace)
	return frameEnd(dst, s)
}

// DecodeListStreams decodes a ListStreams body.
func DecodeListStreams(body []byte) (ListStreams, error) {
	d := decoder{b: body}
	l := ListStreams{Tenant: d.str16("tenant"), Namespace: d.str16("namespace")}
	return l, d.end("list_streams")
}

// StreamInfo describes a stream: its name, config and the tail of each shard.
type StreamInfo struct {
	Name   StreamName
	Config StreamConfig
	// CreatedUnixNano is when the stream was created.
	CreatedUnixNano int64
	// Tails holds each shard's next offset, len == Config.Shards.
	Tails []uint64
	// Replication is each shard's raft group as the answering node sees
	// it, for a replicated stream (Config.Replicas > 1) only: then one per
	// tail, and nil otherwise.
	Replication []ShardReplication
}

// ShardReplication is a replicated shard's raft group as one node sees it.
type ShardReplication struct {
	// Leader is the leader's node id (0: none known); Term the term;
	// Commit the node's commit index.
	Leader, Term, Commit uint64
	// Replicas are the nodes holding the shard.
	Replicas []ReplicaState
	// LagDetail is set when the replicas carry LagRecords and LagBytes
	// (a node sends them to a client that announced FeatureFollowerReads;
	// then at most MaxDetailedReplicas replicas are encoded).
	LagDetail bool
}

// ReplicaState is one replica of a shard.
type ReplicaState struct {
	// Node is the replica's node id.
	Node uint64
	// Lag is how many raft entries the replica is behind the leader's
	// commit index, as the leader knows it; LagUnknown when the answering
	// node does not lead the shard.
	Lag uint64
	// LagRecords and LagBytes are how many records, and how many records
	// bytes, of the shard log the leader has applied that the replica's
	// raft log does not hold yet (LagUnknown where Lag is; only with
	// ShardReplication.LagDetail).
	LagRecords, LagBytes uint64
}

// LagUnknown is ReplicaState.Lag when the answering node does not know it.
const LagUnknown = ^uint64(0)

// maxReplicas bounds a decoded replica count; MaxDetailedReplicas the
// replicas of a ShardReplication with LagDetail (its count byte's top bit
// marks the detail).
const (
	maxReplicas         = 255
	MaxDetailedReplicas = 127
	replicaDetailBit    = 0x80
)

func appendInfo(dst []byte, i StreamInfo) []byte {
	dst = appendName(dst, i.Name)
	dst = appendConfig(dst, i.Config)
	dst = binary.BigEndian.AppendUint64(dst, uint64(i.CreatedUnixNano))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(i.Tails)))
	for _, t := range i.Tails {
		dst = binary.BigEndian.AppendUint64(dst, t)
	}
	if i.Config.Replicas > 1 {
		for k := range i.Tails {
			var r ShardReplication
			if k < len(i.Replication) {
				r = i.Replication[k]
			}
			dst = binary.BigEndian.AppendUint64(dst, r.Leader)
			dst = binary.BigEndian.AppendUint64(dst, r.Term)
			dst = binary.BigEndian.AppendUint64(dst, r.Commit)
			if r.LagDetail {
				n := min(len(r.Replicas), MaxDetailedReplicas)
				dst = append(dst, byte(n)|replicaDetailBit)
				for _, rs := range r.Replicas[:n] {
					dst = binary.BigEndian.AppendUint64(dst, rs.Node)
					dst = binary.BigEndian.AppendUint64(dst, rs.Lag)
					dst = binary.BigEndian.AppendUint64(dst, rs.LagRecords)
					dst = binary.BigEndian.AppendUint64(dst, rs.LagBytes)
				}
				continue
			}
			dst = append(dst, byte(min(len(r.Replicas), maxReplicas)))
			for _, rs := range r.Replicas[:min(len(r.Replicas), maxReplicas)] {
				dst = binary.BigEndian.AppendUint64(dst, rs.Node)
				dst = binary.BigEndian.AppendUint64(dst, rs.Lag)
			}
		}
	}
	return dst
}

// maxShards bounds a decoded shard count (and the tails a StreamInfo may
// carry).
const maxShards = 1 << 16

func (d *decoder) info() StreamInfo {
	i := StreamInfo{Name: d.name(), Config: d.config(), CreatedUnixNano: int64(d.u64("created"))}
	n := d.u32("tail count")
	if d.err == nil && (n > maxShards || int(n)*8 > len(d.b)-d.off) {
		d.fail("tail count %d too large", n)
		return i
	}
	i.Tails = make([]uint64, n)
	for k := range i.Tails {
		i.Tails[k] = d.u64("tail")
	}
	if i.Config.Replicas > 1 && d.err == nil {
		if int(n)*(3*8+1) > len(d.b)-d.off {
			d.fail("replication of %d shards is cut short", n)
			return i
		}
		i.Replication = make([]ShardReplication, n)
		for k := range i.Replication {
			r := &i.Replication[k]
			r.Leader, r.Term, r.Commit = d.u64("leader"), d.u64("term"), d.u64("commit")
			c, size := int(d.u8("replica count")), 16
			if c&replicaDetailBit != 0 {
				c, size, r.LagDetail = c&^replicaDetailBit, 32, true
			}
			if d.err != nil || c*size > len(d.b)-d.off {
				d.fail("replica count %d too large", c)
				return i
			}
			r.Replicas = make([]ReplicaState, c)
			for j := range r.Replicas {
				r.Replicas[j] = ReplicaState{Node: d.u64("replica"), Lag: d.u64("lag")}
				if r.LagDetail {
					r.Replicas[j].LagRecords, r.Replicas[j].LagBytes = d.u64("lag records"), d.u64("lag bytes")
				}
			}
		}
	}
	return i
}

// AppendStreamInfo appends a StreamInfo frame.
func AppendStreamInfo(dst []byte, reqID uint64, i StreamInfo) []byte {
	dst, s := frameStart(dst, TypeStreamInfo, 0, reqID)
	dst = appendInfo(dst, i)
	return frameEnd(dst, s)
}

// DecodeStreamInfo decodes a StreamInfo body.
func DecodeStreamInfo(body []byte) (StreamInfo, error) {
	d := decoder{b: body}
	i := d.info()
	return i, d.end("stream_info")
}

// AppendStreamList appends a StreamList frame.
func AppendStreamList(dst []byte, reqID uint64, list []StreamInfo) []byte {
	dst, s := frameStart(dst, TypeStreamList, 0, reqID)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(list)))
	for _, i := range list {
		dst = appendInfo(dst, i)
	}
	return frameEnd(dst, s)
}

// DecodeStreamList decodes a StreamList body.
func DecodeStreamList(body []byte) ([]StreamInfo, error) {
	d := decoder{b: body}
	n := d.u32("stream count")
	// Each entry is at least 3 (name) + config + 8 (created) + 4 (tails) bytes.
	if d.err == nil && int64(n)*(3+configSize+8+4) > int64(len(body)) {
		return nil, malformed("stream count %d too large for the frame", n)
	}
	out := make([]StreamInfo, 0, n)
	for k := uint32(0); k < n && d.err == nil; k++ {
		out = append(out, d.info())
	}
	return out, d.end("stream_list")
}

// AckMode says whether and how the node answers a publish.
type AckMode uint8

// Ack modes.
const (
	// AckNone: no answer; errors still come back as Error frames.
	AckNone AckMode = 0
	// AckPerMessage: the client sends each record as its own publish and
	// every one is answered.
	AckPerMessage AckMode = 1
	// AckPerBatch: one PublishAck answers the whole batch once it is durable.
	AckPerBatch AckMode = 2
)

// AnyShard in Publish.Shard asks the node to route the batch by its key.
const AnyShard = ^uint32(0)

// Publish flags (the body's flags byte).
const (
	publishFlagConditional = 1 << 0
	publishFlagIdempotent  = 1 << 1
)

// Publish carries a batch of records for one stream. The batch goes to
// Shard, or, when Shard is AnyShard, to the shard the stream's routing picks
// for Key (shard 0 when Key is empty). Records is the encoded records block
// (AppendRecords): it is stored and delivered exactly as sent.
type Publish struct {
	Name  StreamName
	Ack   AckMode
	Shard uint32
	Key   []byte
	// Conditional publishes carry ExpectedOffset: the batch is written only
	// if the shard's tail equals it (CodeConditionFailed otherwise, with the
	// tail in Detail).
	Conditional    bool
	ExpectedOffset uint64
	// Idempotent publishes carry a producer id and the batch's sequence
	// number on this shard (1, 2, 3, ...): a re-send of a batch already
	// written is answered with its original offsets and not written again.
	Idempotent bool
	ProducerID uint64
	Sequence   uint64
	Count      uint32
	Records    []byte
}

// AppendPublish appends a Publish frame. p.Records must hold p.Count records
// encoded with AppendRecords.
func AppendPublish(dst []byte, reqID uint64, p Publish) []byte {
	dst, s := frameStart(dst, TypePublish, 0, reqID)
	dst = appendName(dst, p.Name)
	var f uint8
	if p.Conditional {
		f |= publishFlagConditional
	}
	if p.Idempotent {
		f |= publishFlagIdempotent
	}
	dst = append(dst, byte(p.Ack), f)
	dst = binary.BigEndian.AppendUint32(dst, p.Shard)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(p.Key)))
	dst = append(dst, p.Key...)
	if p.Conditional {
		dst = binary.BigEndian.AppendUint64(dst, p.ExpectedOffset)
	}
	if p.Idempotent {
		dst = binary.BigEndian.AppendUint64(dst, p.ProducerID)
		dst = binary.BigEndian.AppendUint64(dst, p.Sequence)
	}
	dst = binary.BigEndian.AppendUint32(dst, p.Count)
	dst = append(dst, p.Records...)
	return frameEnd(dst, s)
}

// DecodePublish decodes a Publish body. Records shares body's memory. It does
// not validate the records block (ValidateRecords does).
func DecodePublish(body []byte) (Publish, error) {
	d := decoder{b: body}
	p := Publish{Name: d.name(), Ack: AckMode(d.u8("ack mode"))}
	f := d.u8("publish flags")
	if d.err == nil && f&^(publishFlagConditional|publishFlagIdempotent) != 0 {
		d.fail("unknown publish flags 0x%02x", f)
	}
	p.Shard = d.u32("shard")
	kl := d.u16("key length")
	p.Key = d.take(int(kl), "key")
	if f&publishFlagConditional != 0 {
		p.Conditional, p.ExpectedOffset = true, d.u64("expected offset")
	}
	if f&publishFlagIdempotent != 0 {
		p.Idempotent = true
		p.ProducerID = d.u64("producer id")
		p.Sequence = d.u64("sequence")
	}
	p.Count = d.u32("count")
	p.Records = d.rest()
	if d.err == nil && p.Ack > AckPerBatch {
		return p, Errorf(CodeInvalidRequest, "unknown ack mode %d", p.Ack)
	}
	return p, d.end("publish")
}

// PublishAck answers an acked publish: the batch was written at
// [Offset, Offset+Count) on Shard, durably on a durable stream. Duplicate is
// set when an idempotent producer's re-send was recognised: the offsets are
// those of the original write, and nothing was written again.
type PublishAck struct {
	Shard     uint32
	Offset    uint64
	Count     uint32
	Duplicate bool
}

const ackFlagDuplicate = 1 << 0

// AppendPublishAck appends a PublishAck frame.
func AppendPublishAck(dst []byte, reqID uint64, a PublishAck) []byte {
	dst, s := frameStart(dst, TypePublishAck, 0, reqID)
	dst = binary.BigEndian.AppendUint32(dst, a.Shard)
	dst = binary.BigEndian.AppendUint64(dst, a.Offset)
	dst = binary.BigEndian.AppendUint32(dst, a.Count)
	var f uint8
	if a.Duplicate {
		f |= ackFlagDuplicate
	}
	return frameEnd(append(dst, f), s)
}

// DecodePublishAck decodes a PublishAck body.
func DecodePublishAck(body []byte) (PublishAck, error) {
	d := decoder{b: body}
	a := PublishAck{Shard: d.u32("shard"), Offset: d.u64("offset"), Count: d.u32("count")}
	f := d.u8("ack flags")
	if d.err == nil && f&^ackFlagDuplicate != 0 {
		d.fail("unknown ack flags 0x%02x", f)
	}
	a.Duplicate = f&ackFlagDuplicate != 0
	return a, d.end("publish_ack")
}

// StartKind says where a subscription starts.
type StartKind uint8

// Start kinds.
const (
	// StartEarliest: from the first retained record.
	StartEarliest StartKind = 0
	// StartLatest: from the shard's tail: only records published from now on.
	StartLatest StartKind = 1
	// StartOffset: from an explicit offset, at most the tail and at least
	// the first retained offset.
	StartOffset StartKind = 2
)

// Subscribe is the first frame on a subscription stream.
type Subscribe struct {
	Name  StreamName
	Shard uint32
	Start StartKind
	// Offset is used with StartOffset.
	Offset uint64
	// QueueCapacity asks for a queue of this many batches; 0 takes the
	// stream's default. The node clamps it and answers with the grant.
	QueueCapacity uint32
	// Replica says which replica of a replicated shard must serve the
	// subscription (FeatureFollowerReads; ReplicaNearest is not encoded).
	Replica Replica
}

// Replica says which replica of a replicated shard serves a Subscribe or a
// Read. It is encoded as an optional last byte of their bodies, sent only
// to a node that announced FeatureFollowerReads and only when it is not
// ReplicaNearest; a node without the feature refuses the longer body as
// malformed.
type Replica uint8

// Replica choices.
const (
	// ReplicaNearest: the replica on the node the request reached, whether
	// it leads or follows (a follower serves committed records only, and
	// refuses with CodeReplicaBehind when it is behind its leader). A node
	// that holds no replica answers CodeNotLeader naming one.
	ReplicaNearest Replica = 0
	// ReplicaLeader: the shard's leader only; a follower answers
	// CodeNotLeader naming the leader (0: none known yet), and a
	// subscription ends with it when its replica stops leading.
	ReplicaLeader Replica = 1
)

// String returns the replica choice's name: "nearest" or "leader".
func (r Replica) String() string {
	switch r {
	case ReplicaNearest:
		return "nearest"
	case ReplicaLeader:
		return "leader"
	}
	return fmt.Sprintf("replica_%d", uint8(r))
}

// appendReplica appends the optional replica byte.
func appendReplica(dst []byte, r Replica) []byte {
	if r == ReplicaNearest {
		return dst
	}
	return append(dst, byte(r))
}

// replica decodes the optional replica byte that may end a body.
func (d *decoder) replica() Replica {
	if d.err != nil || d.off == len(d.b) {
		return ReplicaNearest
	}
	r := Replica(d.u8("replica"))
	switch {
	case r == ReplicaNearest:
		d.fail("replica byte 0: nearest is sent by leaving the byte out")
	case r != ReplicaLeader && d.err == nil:
		d.err = Errorf(CodeInvalidRequest, "unknown replica choice %d", r)
	}
	return r
}

// AppendSubscribe appends a Subscribe frame.
func AppendSubscribe(dst []byte, reqID uint64, s Subscribe) []byte {
	dst, st := frameStart(dst, TypeSubscribe, 0, reqID)
	dst = appendName(dst, s.Name)
	dst = binary.BigEndian.AppendUint32(dst, s.Shard)
	dst = append(dst, byte(s.Start))
	dst = binary.BigEndian.AppendUint64(dst, s.Offset)
	dst = binary.BigEndian.AppendUint32(dst, s.QueueCapacity)
	dst = appendReplica(dst, s.Replica)
	return frameEnd(dst, st)
}

// DecodeSubscribe decodes a Subscribe body.
func DecodeSubscribe(body []byte) (Subscribe, error) {
	d := decoder{b: body}
	s := Subscribe{Name: d.name(), Shard: d.u32("shard"), Start: StartKind(d.u8("start")),
		Offset: d.u64("offset"), QueueCapacity: d.u32("queue capacity")}
	if d.err == nil && s.Start > StartOffset {
		return s, Errorf(CodeInvalidRequest, "unknown start kind %d", s.Start)
	}
	s.Replica = d.replica()
	return s, d.end("subscribe")
}

// Subscribed answers Subscribe: delivery starts at Offset; Tail is the
// shard's tail when the subscription was registered.
type Subscribed struct {
	Shard         uint32
	Offset        uint64
	Tail          uint64
	QueueCapacity uint32
}

// AppendSubscribed appends a Subscribed frame.
func AppendSubscribed(dst []byte, reqID uint64, s Subscribed) []byte {
	dst, st := frameStart(dst, TypeSubscribed, 0, reqID)
	dst = binary.BigEndian.AppendUint32(dst, s.Shard)
	dst = binary.BigEndian.AppendUint64(dst, s.Offset)
	dst = binary.BigEndian.AppendUint64(dst, s.Tail)
	dst = binary.BigEndian.AppendUint32(dst, s.QueueCapacity)
	return frameEnd(dst, st)
}

// DecodeSubscribed decodes a Subscribed body.
func DecodeSubscribed(body []byte) (Subscribed, error) {
	d := decoder{b: body}
	s := Subscribed{Shard: d.u32("shard"), Offset: d.u64("offset"), Tail: d.u64("tail"), QueueCapacity: d.u32("queue capacity")}
	return s, d.end("subscribed")
}

// AppendDeleteStream appends a DeleteStream frame; the node answers OK or
// Error.
func AppendDeleteStream(dst []byte, reqID uint64, name StreamName) []byte {
	dst, s := frameStart(dst, TypeDeleteStream, 0, reqID)
	dst = appendName(dst, name)
	return frameEnd(dst, s)
}

// DecodeDeleteStream decodes a DeleteStream body.
func DecodeDeleteStream(body []byte) (StreamName, error) {
	d := decoder{b: body}
	n := d.name()
	return n, d.end("delete_stream")
}

// SetReplicas asks a cluster node to change a stream's replica count.
type SetReplicas struct {
	Name     StreamName
	Replicas uint8
}

// AppendSetReplicas appends a SetReplicas frame; the node answers
// StreamInfo (the stream with its new count, which its shards then move
// to) or Error.
func AppendSetReplicas(dst []byte, reqID uint64, r SetReplicas) []byte {
	dst, s := frameStart(dst, TypeSetReplicas, 0, reqID)
	dst = appendName(dst, r.Name)
	dst = append(dst, r.Replicas)
	return frameEnd(dst, s)
}

// DecodeSetReplicas decodes a SetReplicas body.
func DecodeSetReplicas(body []byte) (SetReplicas, error) {
	d := decoder{b: body}
	r := SetReplicas{Name: d.name(), Replicas: d.u8("replicas")}
	return r, d.end("set_replicas") // a count out of range is the node's to refuse (invalid_config)
}

// AppendOK appends an OK frame: the request succeeded and has nothing to say.
func AppendOK(dst []byte, reqID uint64) []byte {
	dst, s := frameStart(dst, TypeOK, 0, reqID)
	return frameEnd(dst, s)
}

// DecodeOK checks an OK body (it is empty).
func DecodeOK(body []byte) error {
	d := decoder{b: body}
	return d.end("ok")
}

// NoEnd in Read.End reads up to the committed tail.
const NoEnd = ^uint64(0)

// Read asks for one page of a shard's committed records in [Start, End),
// at most MaxRecords records and about MaxBytes records bytes (0: the node's
// caps). It never waits and registers nothing with the shard.
type Read struct {
	Name       StreamName
	Shard      uint32
	Start      uint64
	End        uint64
	MaxRecords uint32
	MaxBytes   uint32
	// Replica says which replica of a replicated shard must serve the
	// read (FeatureFollowerReads; ReplicaNearest is not encoded).
	Replica Replica
}

// AppendRead appends a Read frame.
func AppendRead(dst []byte, reqID uint64, r Read) []byte {
	dst, s := frameStart(dst, TypeRead, 0, reqID)
	dst = appendName(dst, r.Name)
	dst = binary.BigEndian.AppendUint32(dst, r.Shard)
	dst = binary.BigEndian.AppendUint64(dst, r.Start)
	dst = binary.BigEndian.AppendUint64(dst, r.End)
	dst = binary.BigEndian.AppendUint32(dst, r.MaxRecords)
	dst = binary.BigEndian.AppendUint32(dst, r.MaxBytes)
	dst = appendReplica(dst, r.Replica)
	return frameEnd(dst, s)
}

// DecodeRead decodes a Read body.
func DecodeRead(body []byte) (Read, error) {
	d := decoder{b: body}
	r := Read{Name: d.name(), Shard: d.u32("shard"), Start: d.u64("start"), End: d.u64("end"),
		MaxRecords: d.u32("max records"), MaxBytes: d.u32("max bytes")}
	r.Replica = d.replica()
	return r, d.end("read")
}

// ReadResult answers Read: the batches holding the page's records (a batch
// may begin before Start or end after the page: readers skip records outside
// [Start, Next)), the offset to read the next page from, and the shard's
// first retained offset and committed tail when the page was read.
type ReadResult struct {
	Next  uint64
	First uint64
	Tail  uint64
	// Batches share the frame body when decoded.
	Batches []BatchView
}

// AppendReadResult appends a ReadResult frame carrying sections.
func AppendReadResult(dst []byte, reqID uint64, next, first, tail uint64, sections []*Section) []byte {
	dst, s := frameStart(dst, TypeReadResult, 0, reqID)
	dst = binary.BigEndian.AppendUint64(dst, next)
	dst = binary.BigEndian.AppendUint64(dst, first)
	dst = binary.BigEndian.AppendUint64(dst, tail)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(sections)))
	for _, sec := range sections {
		dst = append(dst, sec.Head[:]...)
		dst = append(dst, sec.Records...)
	}
	return frameEnd(dst, s)
}

// DecodeReadResult decodes a ReadResult body.
func DecodeReadResult(body []byte) (ReadResult, error) {
	d := decoder{b: body}
	r := ReadResult{Next: d.u64("next"), First: d.u64("first"), Tail: d.u64("tail")}
	n := d.u16("section count")
	if d.err == nil && (n > MaxSectionsPerFrame || int(n)*SectionHeaderSize > len(body)-d.off) {
		return r, malformed("section count %d is over %d or too large for the frame", n, MaxSectionsPerFrame)
	}
	batches, err := d.sections(n)
	if err != nil {
		return r, err
	}
	r.Batches = batches
	return r, d.end("read_result")
}
