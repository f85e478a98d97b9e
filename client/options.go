package client

import (
	"crypto/tls"
	"go.opentelemetry.io/otel/trace"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"time"

	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/net/wire"
)

// Defaults of the Dial options.
const (
	// DefaultPublishInflightBytes bounds the bytes of acked publishes in
	// flight on a connection (WithPublishInflightBytes).
	DefaultPublishInflightBytes = 4 << 20
	// DefaultPublishStreams is how many QUIC publish streams a connection
	// opens at most (publish_shard_streams, WithPublishStreams).
	DefaultPublishStreams = 4
	// DefaultClientName is the name a client gives the node in Hello.
	DefaultClientName = "herald-go"
)

// Option configures Dial.
type Option func(*options)

// options is what the Options set.
type options struct {
	// caFile, insecure and serverName make the tls.Config unless tlsConfig
	// is given.
	caFile     string
	insecure   bool
	serverName string
	// certFile and keyFile are the client certificate for mutual TLS.
	certFile, keyFile string
	// tlsConfig, when set, is used as is (cloned; ALPN added if missing).
	tlsConfig *tls.Config
	// token authenticates the client in Hello.
	token string
	// name is the client name in Hello.
	name string
	// logger receives the client's and the actor runtime's logs.
	logger *slog.Logger
	// inflightBytes bounds acked publish bytes in flight.
	inflightBytes int64
	// publishStreams is the most QUIC publish streams.
	publishStreams int
	// tracerProvider receives the client's spans (nil: the global one).
	tracerProvider trace.TracerProvider
	// maxFrameBytes is the largest frame body the client accepts.
	maxFrameBytes uint32
	// seeds are addresses tried after Dial's (WithSeeds).
	seeds []string
	// dialTimeout bounds one dial of one address.
	dialTimeout time.Duration
	// idleTimeout is how long the connection may hear nothing.
	idleTimeout time.Duration
	// reconnect turns reconnecting on; reconnectPolicy paces it.
	reconnect       bool
	reconnectPolicy Reconnect
	// events receives connection events (nil: none).
	events func(ConnectionEvent)
	// clock times reconnect attempts; jitter draws their random part
	// (tests inject both).
	clock  clock
	jitter func() float64
	// replica is which replica of a replicated shard serves subscriptions
	// and range reads (WithReplica).
	replica Replica
}

func defaultOptions() options {
	return options{
		name:           DefaultClientName,
		logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		inflightBytes:  DefaultPublishInflightBytes,
		publishStreams: DefaultPublishStreams,
		maxFrameBytes:  wire.DefaultMaxFrameBytes,
		dialTimeout:    DefaultDialTimeout,
		idleTimeout:    DefaultIdleTimeout,
		reconnect:      true,
		clock:          realClock{},
		jitter:         rand.Float64,
	}
}

// WithSeeds adds addresses ("host:port") to try after those given to Dial,
// in order: Dial and every reconnect attempt try them in turn until a node
// answers. Dial's own address list may be empty ("") when seeds are given.
func WithSeeds(addrs ...string) Option {
	return func(o *options) { o.seeds = append(o.seeds, addrs...) }
}

// Replica says which replica of a replicated stream's shard serves a
// client's subscriptions and range reads (WithReplica). A node without
// replicas of its own (a single node, a stream without replicas) serves
// them itself whatever the choice.
type Replica = wire.Replica

// Replica choices.
const (
	// ReplicaNearest, the default: the replica on the node the client is
	// connected to (a ClusterClient: the first of its addresses that
	// answers, for each shard), leader or follower. A follower serves
	// committed records only; one that is behind its leader (cut off from
	// it, or too far behind) refuses with ErrReplicaBehind, or ends a
	// subscription with it, and the client goes on at another replica from
	// the offset after the last record it received. A node that holds no
	// replica of the shard answers ErrNotLeader naming one, and a
	// ClusterClient goes there.
	ReplicaNearest = wire.ReplicaNearest
	// ReplicaLeader: the shard's leader only. A follower refuses with
	// ErrNotLeader naming the leader; a ClusterClient goes there, and
	// moves a subscription to the next leader when its replica stops
	// leading. A Client connected to a follower gets the error (a
	// subscription's shard ends with it).
	ReplicaLeader = wire.ReplicaLeader
)

// WithReplica says which replica of a replicated stream's shard serves
// Subscribe and Read (default ReplicaNearest). ReplicaLeader needs a node
// that announces the follower_reads feature: against an older one,
// Subscribe and Read fail with an *UnsupportedError.
func WithReplica(r Replica) Option { return func(o *options) { o.replica = r } }

// WithDialTimeout bounds each dial of one address, the QUIC handshake and
// Hello included (default DefaultDialTimeout, 2 s; d <= 0 keeps the
// default): an address where no node answers fails after d with
// ErrNoNodeAnswered, and the next address is tried.
func WithDialTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.dialTimeout = d
		}
	}
}

// WithIdleTimeout bounds how long a node that stopped answering under a
// live connection (it died, or the network dropped it) goes unnoticed
// before the client takes the connection as lost and reconnects (default
// DefaultIdleTimeout, 5 s; at least 1 s). The client sends a QUIC
// keep-alive after a third of it without traffic, so a live node, even a
// quiet one, is never taken for gone. The node's idle_timeout applies if it
// is shorter.
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.idleTimeout = max(d, minIdleTimeout)
		}
	}
}

// WithCAFile trusts the PEM CA certificates in path instead of the system
// roots; several files, comma-separated, are all trusted. A development
// node writes its CA to <data dir>/tls/ca.pem (in a development cluster
// each node has its own: trust every node's).
func WithCAFile(path string) Option { return func(o *options) { o.caFile = path } }

// WithInsecure skips verification of the node's certificate. For experiments
// only: anyone on the path can impersonate the node.
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// WithServerName sets the name the node's certificate must carry (and the
// SNI). By default it is the host of the dialed address when that is a DNS
// name, and "localhost" (which development certificates carry) when it is an
// IP address.
func WithServerName(name string) Option { return func(o *options) { o.serverName = name } }

// WithTLSConfig dials with conf (cloned) instead of building one from
// WithCAFile, WithInsecure and WithServerName. ALPN herald/1 is added when
// conf offers none.
func WithTLSConfig(conf *tls.Config) Option { return func(o *options) { o.tlsConfig = conf } }

// WithClientCert presents the PEM certificate in certFile (with its key in
// keyFile) to a node that verifies client certificates (mutual TLS); the
// node takes the client's tenant from the certificate's subject common
// name. Ignored with WithTLSConfig, whose Certificates are used instead.
func WithClientCert(certFile, keyFile string) Option {
	return func(o *options) { o.certFile, o.keyFile = certFile, keyFile }
}

// WithToken authenticates the client with token (sent in Hello). An empty
// token sends none, which a node in dev mode accepts.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithName names the client in the node's logs (default "herald-go").
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithLogger sends the client's logs, and its actor runtime's, to l (default:
// discarded).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithPublishInflightBytes bounds the bytes of publishes in flight on the
// client (default 4 MiB; n <= 0 keeps the default). A publisher waits for
// room, honouring its context, and its bytes stay counted until its ack
// arrives (an AckNone publish's, until it is written). While the client
// reconnects, publishes wait in this budget for the new connection: at most
// n bytes of them queue up, and later ones wait. A batch larger than n is
// sent alone, when nothing else is in flight.
func WithPublishInflightBytes(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.inflightBytes = n
		}
	}
}

// WithMaxFrameBytes sets the largest frame body the client accepts
// (default 16 MiB, wire.DefaultMaxFrameBytes). A node whose max_frame_bytes
// is larger refuses a client that accepts less, with ErrFrameTooLarge at
// Dial: it could hold records no such client can receive.
func WithMaxFrameBytes(n uint32) Option {
	return func(o *options) {
		if n > 0 {
			o.maxFrameBytes = n
		}
	}
}

// WithPublishStreams sets publish_shard_streams: the most QUIC publish
// streams the connection opens (default 4; n < 1 keeps the default). Each
// (stream, shard) the client publishes to gets a publish stream of its own,
// first come first served, so a shard whose node-side storage stalls holds
// up only its own publishes. Once n streams are open, later (stream, shard)
// pairs share them round-robin, and a stalled pooled shard can hold up the
// others on its stream; raise n for clients that publish to many shards at
// once. Whatever n is, all publishes of one client to one shard travel on one
// QUIC stream, in issue order.
func WithPublishStreams(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.publishStreams = n
		}
	}
}

// clientTLS returns the tls.Config to dial addr with.
func (o *options) clientTLS(addr string) (*tls.Config, error) {
	if o.tlsConfig != nil {
		conf := o.tlsConfig.Clone()
		if len(conf.NextProtos) == 0 {
			conf.NextProtos = []string{wire.ALPN}
		}
		if conf.MinVersion < tls.VersionTLS13 {
			conf.MinVersion = tls.VersionTLS13
		}
		return conf, nil
	}
	name := o.serverName
	if name == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" && net.ParseIP(host) == nil {
			name = host
		}
	}
	return transport.ClientTLSConfig(transport.ClientTLSOptions{CAFile: o.caFile, Insecure: o.insecure, ServerName: name,
		CertFile: o.certFile, KeyFile: o.keyFile})
}
