package supervisors

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Config is a node's configuration. Every field has a yaml key; the same key
// upper-cased with a HERALD_ prefix is its environment variable (nested keys
// join with '_': badger.mem_table_size is HERALD_BADGER_MEM_TABLE_SIZE).
// docs/configuration.md lists every key with its default.
type Config struct {
	// DataDir holds the Badger database, the generated certificates and the
	// node id.
	DataDir string `yaml:"data_dir"`
	// Listen is the QUIC listen address.
	Listen string `yaml:"listen"`
	// HTTP is the HTTP listen address for /healthz and /readyz; empty turns
	// the HTTP listener off.
	HTTP string `yaml:"http"`
	// TLSCert and TLSKey are PEM files for the QUIC listener. When both are
	// empty the node generates a self-signed CA and server certificate into
	// DataDir/tls (ca.pem, server.pem, server-key.pem) and reuses them.
	TLSCert string `yaml:"tls_cert"`
	// TLSKey is the private key for TLSCert.
	TLSKey string `yaml:"tls_key"`
	// TLSClientCA turns on mutual TLS: client certificates are verified
	// against this PEM CA file and a verified certificate's subject common
	// name is the client's tenant. Certificates are required unless
	// AuthTokensFile is set too, when a client may use either.
	TLSClientCA string `yaml:"tls_client_ca"`
	// TLSClientPermissions are what a verified client certificate allows
	// on its tenant, comma-separated: publish, subscribe, consume, manage.
	TLSClientPermissions string `yaml:"tls_client_permissions"`
	// TLSClientNamespaces, comma-separated, limits certificate clients to
	// these namespaces of their tenant (empty: all).
	TLSClientNamespaces string `yaml:"tls_client_namespaces"`
	// AuthTokensFile is a YAML file of tokens, each bound to a tenant and
	// permissions (docs/security.md). With neither it nor TLSClientCA the
	// node runs in dev mode: every client may do everything, and the node
	// says so in its log at start.
	AuthTokensFile string `yaml:"auth_tokens_file"`
	// MaxConnections bounds the node's client connections; one more is
	// refused at its handshake (0: no bound).
	MaxConnections int `yaml:"max_connections"`
	// MaxStreamsPerConnection bounds the QUIC streams a client may have
	// open at once (its control stream, publish streams, subscriptions,
	// group members). With MaxSubscriptionsPerConnection set it must be at
	// least StreamsBeyondSubscriptions more.
	MaxStreamsPerConnection int `yaml:"max_streams_per_connection"`
	// MaxSubscriptionsPerConnection bounds one connection's live
	// subscriptions and group push members (0: only the streams bound).
	MaxSubscriptionsPerConnection int `yaml:"max_subscriptions_per_connection"`
	// MaxStreamsPerTenant bounds the streams one tenant may have; a create
	// (or an auto-create by publish) beyond it is refused (0: no bound).
	MaxStreamsPerTenant int `yaml:"max_streams_per_tenant"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text or json.
	LogFormat string `yaml:"log_format"`
	// AutoCreateStreams creates a stream (one shard, durable) on its first
	// publish. On by default for development; turn it off in production.
	AutoCreateStreams bool `yaml:"auto_create_streams"`
	// MaxFrameBytes bounds one frame body, in bytes.
	MaxFrameBytes uint32 `yaml:"max_frame_bytes"`
	// PublishWindow is how many acked publishes may be unanswered per
	// publish stream on a connection.
	PublishWindow int `yaml:"publish_window"`
	// SubscriberQueueCapacity is a subscription's queue bound in batches when
	// the subscriber asks for none.
	SubscriberQueueCapacity int `yaml:"subscriber_queue_capacity"`
	// SubscriberQueueCapacityMax clamps what a subscriber may ask for.
	SubscriberQueueCapacityMax int `yaml:"subscriber_queue_capacity_max"`
	// SubscriberQueueMaxBytes bounds a subscription's queued payload bytes;
	// 0 means no byte bound. A batch larger than the bound still enters an
	// empty queue.
	SubscriberQueueMaxBytes int64 `yaml:"subscriber_queue_max_bytes"`
	// SubscriberEgressMaxBytes bounds the records bytes a connection's
	// subscriptions have taken from their queues and not yet written to
	// their QUIC streams, split equally among them; 0 means no bound.
	SubscriberEgressMaxBytes int64 `yaml:"subscriber_egress_max_bytes"`
	// SubscriberLaneQueuePolicy is drop_new (the default: the egress bound
	// is split equally, so a stalled stream fills only its own share) or
	// block (one pool per connection: a subscription whose stream stalls can
	// take it all, and then every subscription of the connection waits).
	SubscriberLaneQueuePolicy string `yaml:"subscriber_lane_queue_policy"`
	// SubscriberQueueMaxBytesTotal bounds the records bytes in every
	// subscription queue and lane of the node together; 0 (the default)
	// turns it off. It gives up isolation: once slow subscribers hold it, a
	// fast subscriber's batch meets the overflow policy too.
	SubscriberQueueMaxBytesTotal int64 `yaml:"subscriber_queue_max_bytes_total"`
	// ReplayRingMaxBytesTotal bounds every shard's replay ring together;
	// 0 (the default) turns it off. A ring over it gives up its oldest
	// batches first.
	ReplayRingMaxBytesTotal int64 `yaml:"replay_ring_max_bytes_total"`
	// EventBatchMaxEvents and EventBatchMaxBytes bound one EventBatch frame:
	// a subscription sends what is queued as one frame up to these bounds.
	EventBatchMaxEvents int `yaml:"event_batch_max_events"`
	// EventBatchMaxBytes bounds one EventBatch frame's records bytes (a
	// larger batch goes alone).
	EventBatchMaxBytes int `yaml:"event_batch_max_bytes"`
	// EventBatchMaxDelayMicros is event_batch_max_delay_us: under load (the
	// last frame written was full) a frame waits up to this long to fill; a
	// trickle is never delayed. 0 turns it off.
	EventBatchMaxDelayMicros int `yaml:"event_batch_max_delay_us"`
	// PubQueueDepth bounds a shard's admitted-but-uncommitted publishes; a
	// publish that finds it full waits.
	PubQueueDepth int `yaml:"pub_queue_depth"`
	// PublishQueueWaitTimeoutMillis is how long a publish waits for
	// admission before it is refused as overloaded.
	PublishQueueWaitTimeoutMillis int `yaml:"publish_queue_wait_timeout_ms"`
	// ReplayRingRecords is how many of its most recent committed records a
	// shard keeps in memory (in whole batches) so resumes and subscribers
	// that fall a little behind are served without reading storage.
	ReplayRingRecords int `yaml:"replay_ring_records"`
	// ReplayRingMaxBytes bounds a shard's replay ring by records bytes.
	ReplayRingMaxBytes int64 `yaml:"replay_ring_max_bytes"`
	// EphemeralShardMaxBytes bounds what an ephemeral shard keeps in memory;
	// the oldest batches go first.
	EphemeralShardMaxBytes int64 `yaml:"ephemeral_shard_max_bytes"`
	// RetentionCheckInterval is how often streams' retention (by age and by
	// bytes) is enforced, in whole batches.
	RetentionCheckInterval time.Duration `yaml:"retention_check_interval"`
	// ReadMaxRecords and ReadMaxBytes cap one range-read page.
	ReadMaxRecords int `yaml:"read_max_records"`
	// ReadMaxBytes caps the records bytes of one range-read page.
	ReadMaxBytes int `yaml:"read_max_bytes"`
	// HandshakeTimeout bounds the QUIC handshake and the Hello exchange,
	// and how long a new data stream may go silent before its first frame
	// is whole (a large first frame may take longer, as long as it keeps
	// arriving).
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// IdleTimeout closes a QUIC connection that has been silent this long
	// (clients send keep-alives).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ShutdownTimeout bounds the drain on SIGINT/SIGTERM.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// DrainGrace is how long, once a drain has answered everything it
	// admitted, the node waits for clients to close their connections
	// (they do as soon as their in-flight publishes are answered) before
	// closing them itself; within ShutdownTimeout.
	DrainGrace time.Duration `yaml:"drain_grace"`
	// GroupVisibilityTimeout is how long a consumer-group claim holds before
	// its record is redelivered.
	GroupVisibilityTimeout time.Duration `yaml:"group_visibility_timeout"`
	// GroupMaxAttempts is how many deliveries a record gets before it is
	// dead-lettered.
	GroupMaxAttempts int `yaml:"group_max_attempts"`
	// GroupSessionTimeout removes a push member that sent no ack or
	// heartbeat for this long; its shards go to the others.
	GroupSessionTimeout time.Duration `yaml:"group_session_timeout"`
	// GroupMaxInFlight bounds a group's claims (delivered, unsettled
	// records) across its shards.
	GroupMaxInFlight int `yaml:"group_max_in_flight"`
	// GroupMaxPoll bounds the records of one poll.
	GroupMaxPoll int `yaml:"group_max_poll"`
	// GroupMaxPollWait bounds how long a poll waits for work.
	GroupMaxPollWait time.Duration `yaml:"group_max_poll_wait"`
	// GroupMaxWindow bounds a push member's credit window.
	GroupMaxWindow int `yaml:"group_max_window"`
	// GroupMaxPerStream bounds the consumer groups of one stream.
	GroupMaxPerStream int `yaml:"group_max_per_stream"`
	// TraceExporter is where the node's spans go: none, stdout or otlp.
	// Empty follows OTEL_TRACES_EXPORTER (otlp, console; anything else is
	// none).
	TraceExporter string `yaml:"trace_exporter"`
	// TraceOTLPProtocol is grpc or http/protobuf; empty follows
	// OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else http/protobuf. The endpoint
	// and headers come from the standard OTEL_EXPORTER_OTLP_* variables.
	TraceOTLPProtocol string `yaml:"trace_otlp_protocol"`
	// TraceSampleRatio is the share of publishes that carry no trace
	// context for which the node starts a trace of its own (0 to 1;
	// publishes with trace context follow the publisher's decision). -1,
	// the default, means 1 with trace_exporter stdout and 0 otherwise.
	TraceSampleRatio float64 `yaml:"trace_sample_ratio"`
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ on the
	// HTTP listener. Off by default: profiles show the node's internals to
	// whoever reaches the listener.
	Pprof bool `yaml:"pprof"`
	// Dashboard serves the live dashboard at / and its JSON API under
	// /api/v1/ on the HTTP listener (docs/observability.md). The API
	// authenticates with the node's tokens when auth_tokens_file is set.
	Dashboard bool `yaml:"dashboard"`
	// ActorMetrics turns on protoactor's own metrics (message receive
	// durations, spawns, futures, mailbox lengths) on /metrics. It registers
	// a mailbox gauge callback per spawned actor that protoactor never
	// removes, so memory grows with every connection and subscription ever
	// made: for diagnosis, not for long-running production nodes.
	ActorMetrics bool `yaml:"actor_metrics"`
	// NodeID is this node's id in a cluster (non-zero, never reused); it
	// must be one of Peers. Without Peers it is not used.
	NodeID uint64 `yaml:"node_id"`
	// ClusterListen is the UDP address peers reach this node at (QUIC,
	// ALPN herald-peer/1); required with Peers.
	ClusterListen string `yaml:"cluster_listen"`
	// Advertise is the client address (host:port) this node tells the
	// other nodes of a cluster to give clients that ask for the cluster's
	// nodes ("": Listen when it names a host, none otherwise). Not used
	// without Peers.
	Advertise string `yaml:"advertise"`
	// Peers lists every node of the cluster, this one included, as
	// id=address pairs, comma-separated ("1=10.0.0.1:7402,2=..."). The
	// address of a peer is what this list says. Empty: a single node, as
	// without any cluster setting.
	Peers string `yaml:"peers"`
	// ClusterCA, ClusterCert and ClusterKey are PEM files for mutual TLS
	// between peers: every node's certificate chains to ClusterCA. All
	// three or none; with none, peer traffic is encrypted but not
	// authenticated (development only; the node says so in its log).
	ClusterCA   string `yaml:"cluster_ca"`
	ClusterCert string `yaml:"cluster_cert"`
	ClusterKey  string `yaml:"cluster_key"`
	// ClusterJoin is set on a node added to a running cluster (herald
	// cluster add): with nothing stored, it takes the cluster's state from
	// the cluster's metadata group, instead of starting a new cluster of
	// the nodes of Peers. Ignored once the node has joined.
	ClusterJoin bool `yaml:"cluster_join"`
	// RaftElectionTimeoutMillis is how long a follower waits without
	// hearing from its leader before it stands for election (randomized
	// between one and two times this); a leader heartbeats ten times as
	// often. Every node of a cluster should use the same value.
	RaftElectionTimeoutMillis int `yaml:"raft_election_timeout_ms"`
	// ReplicationTimeoutMillis bounds how long a publish to a replicated
	// stream (or a replicated stream's create) waits to be committed
	// before it is answered replication_timeout.
	ReplicationTimeoutMillis int `yaml:"replication_timeout_ms"`
	// RaftCompactEntries is how many raft entries every replica of a
	// replicated shard holds past the last compaction before the shard's
	// leader compacts the group's raft log.
	RaftCompactEntries int `yaml:"raft_compact_entries"`
	// FollowerMaxLagEntries is how many raft entries a replicated shard's
	// follower may have applied fewer than its leader committed before it
	// refuses reads and subscriptions as replica_behind (and ends the
	// subscriptions it serves); 0: no bound (silence and elections still
	// count).
	FollowerMaxLagEntries int `yaml:"follower_max_lag_entries"`
	// LeaderBalanceIntervalMillis is how often the leader of a replicated
	// shard led by a replica other than its preferred one checks whether
	// to hand leadership back (and how long a new leader waits before its
	// first check): leaders spread again this long at most after a node
	// that came back has caught up. 0 turns the handing back off.
	LeaderBalanceIntervalMillis int `yaml:"leader_balance_interval_ms"`
	// Badger sizes the storage engine.
	Badger BadgerConfig `yaml:"badger"`
}

// ParsePeers parses a peers list ("1=host:port,2=host:port"): ids
// non-zero and distinct, addresses host:port.
func ParsePeers(s string) (map[uint64]string, error) {
	out := map[uint64]string{}
	for _, item := range parseList(s) {
		id, addr, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("peer %q: want id=host:port", item)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("peer %q: the id must be a number above 0", item)
		}
		addr = strings.TrimSpace(addr)
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %q: %v", item, err)
		}
		if _, dup := out[n]; dup {
			return nil, fmt.Errorf("peer %d is listed twice", n)
		}
		for other, a := range out {
			if a == addr {
				return nil, fmt.Errorf("peers %d and %d have the same address %s", other, n, addr)
			}
		}
		out[n] = addr
	}
	return out, nil
}

// BadgerConfig sizes Badger. The defaults suit a small machine (2 cores, a
// few hundred MB for the node); raise them on bigger ones.
type BadgerConfig struct {
	// MemTableSize is the size of one memtable in bytes.
	MemTableSize int64 `yaml:"mem_table_size"`
	// NumMemtables is how many memtables may be held in memory.
	NumMemtables int `yaml:"num_memtables"`
	// BlockCacheSize is the block cache in bytes.
	BlockCacheSize int64 `yaml:"block_cache_size"`
	// IndexCacheSize bounds table index memory in bytes.
	IndexCacheSize int64 `yaml:"index_cache_size"`
	// ValueLogFileSize is the size of one value-log file in bytes.
	ValueLogFileSize int64 `yaml:"value_log_file_size"`
	// ValueThreshold: values at least this big go to the value log.
	ValueThreshold int64 `yaml:"value_threshold"`
	// NumCompactors is the number of compaction goroutines.
	NumCompactors int `yaml:"num_compactors"`
}

// MinIdleTimeout is the shortest idle_timeout: quic-go, on the client side,
// raises a peer's advertised idle timeout to 5 s and paces its keep-alives
// by that, so a node closing connections sooner would drop idle clients
// that are alive.
const MinIdleTimeout = 5 * time.Second

// StreamsBeyondSubscriptions is how many more QUIC streams than
// max_subscriptions_per_connection a connection must be allowed: its control
// stream, its publish streams (the Go client keeps up to four), and the
// stream on which a subscription beyond the bound is refused with
// overloaded. With fewer, that subscription's stream could not be opened:
// the client would wait for a stream until it gave up, and never learn why.
const StreamsBeyondSubscriptions = 24

// DefaultConfig returns the embedded defaults: data in ./data, QUIC on
// 127.0.0.1:7400, HTTP on 127.0.0.1:7401.
func DefaultConfig() Config {
	return Config{
		DataDir:                       "./data",
		Listen:                        "127.0.0.1:7400",
		HTTP:                          "127.0.0.1:7401",
		LogLevel:                      "info",
		LogFormat:                     "text",
		TraceSampleRatio:              -1,
		AutoCreateStreams:             true,
		Dashboard:                     true,
		MaxFrameBytes:                 16 << 20,
		PublishWindow:                 256,
		SubscriberQueueCapacity:       512,
		SubscriberQueueCapacityMax:    4096,
		SubscriberQueueMaxBytes:       128 << 20,
		ReplayRingRecords:             1024,
		SubscriberEgressMaxBytes:      256 << 20,
		SubscriberLaneQueuePolicy:     "drop_new",
		EventBatchMaxDelayMicros:      250,
		EventBatchMaxEvents:           64,
		EventBatchMaxBytes:            64 << 10,
		PubQueueDepth:                 1024,
		PublishQueueWaitTimeoutMillis: 2000,
		RaftElectionTimeoutMillis:     1000,
		ReplicationTimeoutMillis:      5000,
		RaftCompactEntries:            10000,
		FollowerMaxLagEntries:         1000,
		LeaderBalanceIntervalMillis:   2000,
		RetentionCheckInterval:        30 * time.Second,
		ReadMaxRecords:                1000,
		ReadMaxBytes:                  1 << 20,
		ReplayRingMaxBytes:            64 << 20,
		EphemeralShardMaxBytes:        64 << 20,
		HandshakeTimeout:              5 * time.Second,
		TLSClientPermissions:          "publish,subscribe,consume,manage",
		MaxConnections:                10000,
		MaxStreamsPerConnection:       1000 + StreamsBeyondSubscriptions,
		MaxSubscriptionsPerConnection: 1000,
		MaxStreamsPerTenant:           10000,
		IdleTimeout:                   30 * time.Second,
		ShutdownTimeout:               10 * time.Second,
		DrainGrace:                    5 * time.Second,
		GroupVisibilityTimeout:        30 * time.Second,
		GroupMaxAttempts:              5,
		GroupSessionTimeout:           30 * time.Second,
		GroupMaxInFlight:              10000,
		GroupMaxPoll:                  1000,
		GroupMaxPollWait:              30 * time.Second,
		GroupMaxWindow:                10000,
		GroupMaxPerStream:             1000,
		Badger: BadgerConfig{
			MemTableSize:     16 << 20,
			NumMemtables:     2,
			BlockCacheSize:   16 << 20,
			IndexCacheSize:   16 << 20,
			ValueLogFileSize: 32 << 20, // storage.DefaultBadgerOptions says why
			ValueThreshold:   1024,
			NumCompactors:    2,
		},
	}
}

// Validate reports every invalid value at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config %s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.DataDir == "" {
		bad("data_dir", "must be set")
	}
	if c.Listen == "" {
		bad("listen", "must be set")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls_cert", "tls_cert and tls_key must be given together")
	}
	if c.Peers == "" {
		if c.ClusterListen != "" || c.ClusterCA != "" || c.ClusterCert != "" || c.ClusterKey != "" || c.ClusterJoin {
			bad("peers", "cluster_listen, cluster_join and cluster_ca/cert/key need peers (a node without peers is a single node)")
		}
	} else if peers, err := ParsePeers(c.Peers); err != nil {
		bad("peers", "%v", err)
	} else {
		if c.NodeID == 0 {
			bad("node_id", "must be set (non-zero) with peers")
		} else if _, ok := peers[c.NodeID]; !ok {
			bad("node_id", "%d is not in peers", c.NodeID)
		}
		if c.Advertise != "" {
			if _, _, err := net.SplitHostPort(c.Advertise); err != nil {
				bad("advertise", "%v", err)
			} else if len(c.Advertise) > 1024 {
				bad("advertise", "longer than 1024 bytes")
			}
		}
		if c.ClusterListen == "" {
			bad("cluster_listen", "must be set with peers")
		} else if _, _, err := net.SplitHostPort(c.ClusterListen); err != nil {
			bad("cluster_listen", "%v", err)
		}
		if n := countSet(c.ClusterCA, c.ClusterCert, c.ClusterKey); n != 0 && n != 3 {
			bad("cluster_ca", "cluster_ca, cluster_cert and cluster_key go together")
		}
	}
	if c.TLSClientCA != "" {
		if _, err := certGrant(*c); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range parseList(c.TLSClientNamespaces) {
		if err := (wire.StreamName{Tenant: "t", Namespace: ns, Stream: "s"}).Validate(); err != nil {
			bad("tls_client_namespaces", "%v", err)
		}
	}
	for _, l := range []struct {
		key string
		v   int
	}{{"max_connections", c.MaxConnections}, {"max_subscriptions_per_connection", c.MaxSubscriptionsPerConnection},
		{"max_streams_per_tenant", c.MaxStreamsPerTenant}} {
		if l.v < 0 {
			bad(l.key, "must not be negative")
		}
	}
	if c.MaxStreamsPerConnection < 1 || c.MaxStreamsPerConnection > 1<<20 {
		bad("max_streams_per_connection", "%d is outside [1, 1048576]", c.MaxStreamsPerConnection)
	} else if subs := c.MaxSubscriptionsPerConnection; subs > 0 && c.MaxStreamsPerConnection < subs+StreamsBeyondSubscriptions {
		bad("max_streams_per_connection", "%d leaves too few streams beyond max_subscriptions_per_connection (%d): it must be at least %d, "+
			"for the control stream, the publish streams and the stream a subscription too many is refused on "+
			"(or set max_subscriptions_per_connection to 0 to bound subscriptions by streams alone)",
			c.MaxStreamsPerConnection, subs, subs+StreamsBeyondSubscriptions)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "%q is not debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		bad("log_format", "%q is not text or json", c.LogFormat)
	}
	if c.MaxFrameBytes < 64<<10 || c.MaxFrameBytes > 1<<30 {
		bad("max_frame_bytes", "%d is outside [65536, 1073741824]", c.MaxFrameBytes)
	}
	if c.PublishWindow < 1 || c.PublishWindow > 1<<16 {
		bad("publish_window", "%d is outside [1, 65536]", c.PublishWindow)
	}
	if c.SubscriberQueueCapacityMax < 1 {
		bad("subscriber_queue_capacity_max", "must be at least 1")
	}
	if c.SubscriberQueueCapacity < 1 || c.SubscriberQueueCapacity > c.SubscriberQueueCapacityMax {
		bad("subscriber_queue_capacity", "%d is outside [1, subscriber_queue_capacity_max]", c.SubscriberQueueCapacity)
	}
	if c.SubscriberQueueMaxBytes < 0 {
		bad("subscriber_queue_max_bytes", "must not be negative")
	}
	switch c.SubscriberLaneQueuePolicy {
	case "drop_new", "block":
	default:
		bad("subscriber_lane_queue_policy", "%q is not drop_new or block", c.SubscriberLaneQueuePolicy)
	}
	if c.SubscriberQueueMaxBytesTotal < 0 {
		bad("subscriber_queue_max_bytes_total", "must not be negative")
	}
	if c.ReplayRingMaxBytesTotal < 0 {
		bad("replay_ring_max_bytes_total", "must not be negative")
	}
	if c.SubscriberEgressMaxBytes < 0 {
		bad("subscriber_egress_max_bytes", "must not be negative")
	}
	if c.EventBatchMaxEvents < 1 || c.EventBatchMaxEvents > 4096 {
		bad("event_batch_max_events", "%d is outside [1, 4096]", c.EventBatchMaxEvents)
	}
	if c.EventBatchMaxBytes < 1024 {
		bad("event_batch_max_bytes", "must be at least 1024")
	}
	if c.EventBatchMaxDelayMicros < 0 || c.EventBatchMaxDelayMicros > 1_000_000 {
		bad("event_batch_max_delay_us", "%d is outside [0, 1000000]", c.EventBatchMaxDelayMicros)
	}
	if c.PubQueueDepth < 1 {
		bad("pub_queue_depth", "must be at least 1")
	}
	if c.RaftElectionTimeoutMillis < 100 {
		bad("raft_election_timeout_ms", "must be at least 100, got %d", c.RaftElectionTimeoutMillis)
	}
	if c.LeaderBalanceIntervalMillis < 0 {
		bad("leader_balance_interval_ms", "must be 0 (off) or more, got %d", c.LeaderBalanceIntervalMillis)
	}
	if c.RaftCompactEntries < 1 {
		bad("raft_compact_entries", "must be at least 1, got %d", c.RaftCompactEntries)
	}
	if c.FollowerMaxLagEntries < 0 {
		bad("follower_max_lag_entries", "must not be negative, got %d", c.FollowerMaxLagEntries)
	}
	if c.ReplicationTimeoutMillis < 100 {
		bad("replication_timeout_ms", "must be at least 100, got %d", c.ReplicationTimeoutMillis)
	}
	if c.PublishQueueWaitTimeoutMillis < 1 {
		bad("publish_queue_wait_timeout_ms", "must be at least 1")
	}
	if c.ReplayRingRecords < 0 {
		bad("replay_ring_records", "must not be negative")
	}
	if c.ReadMaxRecords < 1 {
		bad("read_max_records", "must be at least 1")
	}
	if c.ReadMaxBytes < 1024 || c.ReadMaxBytes > int(c.MaxFrameBytes)-1024 {
		bad("read_max_bytes", "%d is outside [1024, max_frame_bytes - 1024]", c.ReadMaxBytes)
	}
	if c.ReplayRingMaxBytes < 0 {
		bad("replay_ring_max_bytes", "must not be negative")
	}
	if c.EphemeralShardMaxBytes < 0 {
		bad("ephemeral_shard_max_bytes", "must not be negative")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"handshake_timeout", c.HandshakeTimeout}, {"idle_timeout", c.IdleTimeout}, {"shutdown_timeout", c.ShutdownTimeout},
		{"drain_grace", c.DrainGrace},
		{"retention_check_interval", c.RetentionCheckInterval}, {"group_visibility_timeout", c.GroupVisibilityTimeout},
		{"group_session_timeout", c.GroupSessionTimeout}, {"group_max_poll_wait", c.GroupMaxPollWait}} {
		if d.v <= 0 {
			bad(d.key, "must be positive")
		}
	}
	if c.IdleTimeout > 0 && c.IdleTimeout < MinIdleTimeout {
		bad("idle_timeout", "%s is below %s: QUIC clients (quic-go) take a shorter advertised idle timeout as %s and send keep-alives only every %s, so the node would close healthy idle connections",
			c.IdleTimeout, MinIdleTimeout, MinIdleTimeout, MinIdleTimeout/2)
	}
	for _, r := range []struct {
		key string
		v   int
	}{{"group_max_attempts", c.GroupMaxAttempts}, {"group_max_in_flight", c.GroupMaxInFlight}, {"group_max_poll", c.GroupMaxPoll},
		{"group_max_window", c.GroupMaxWindow}, {"group_max_per_stream", c.GroupMaxPerStream}} {
		if r.v < 1 {
			bad(r.key, "must be at least 1")
		}
	}
	switch c.TraceExporter {
	case "", traceOff, traceStdout, traceOTLP:
	default:
		bad("trace_exporter", "%q: want none, stdout or otlp", c.TraceExporter)
	}
	switch c.TraceOTLPProtocol {
	case "", "grpc", "http/protobuf":
	default:
		bad("trace_otlp_protocol", "%q: want grpc or http/protobuf", c.TraceOTLPProtocol)
	}
	if r := c.TraceSampleRatio; r != -1 && (r < 0 || r > 1 || r != r) {
		bad("trace_sample_ratio", "%v: want 0 to 1, or -1 (1 with trace_exporter stdout, else 0)", r)
	}
	if c.GroupMaxPoll > c.GroupMaxInFlight {
		bad("group_max_poll", "%d exceeds group_max_in_flight %d", c.GroupMaxPoll, c.GroupMaxInFlight)
	}
	b := c.Badger
	// A batch is one Badger value: it must fit a value-log file, or one
	// valid publish would fail storage for everyone.
	if int64(c.MaxFrameBytes)+4096 > b.ValueLogFileSize {
		bad("max_frame_bytes", "%d does not fit badger.value_log_file_size %d (leave 4 KiB)", c.MaxFrameBytes, b.ValueLogFileSize)
	}
	for _, r := range []struct {
		key      string
		v, least int64
	}{
		{"badger.mem_table_size", b.MemTableSize, 1 << 20},
		{"badger.num_memtables", int64(b.NumMemtables), 1},
		{"badger.block_cache_size", b.BlockCacheSize, 0},
		{"badger.index_cache_size", b.IndexCacheSize, 0},
		{"badger.value_log_file_size", b.ValueLogFileSize, 1 << 20},
		{"badger.value_threshold", b.ValueThreshold, 1},
		{"badger.num_compactors", int64(b.NumCompactors), 2},
	} {
		if r.v < r.least {
			bad(r.key, "%d is below the minimum %d", r.v, r.least)
		}
	}
	return errors.Join(errs...)
}

// countSet counts the non-empty values.
func countSet(vs ...string) int {
	n := 0
	for _, v := range vs {
		if v != "" {
			n++
		}
	}
	return n
}
