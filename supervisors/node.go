package supervisors

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/quic-go/quic-go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/actors"
	"github.com/heraldmq/herald/net/transport"
	"github.com/heraldmq/herald/net/wire"
	"github.com/heraldmq/herald/storage"
)

// Options are a node's settings that do not come from configuration.
type Options struct {
	// Logger receives the node's logs; nil builds one from the config's
	// log_level and log_format on stderr.
	Logger *slog.Logger
	// SubscriptionProps and ShardProps, if set, wrap the props of every
	// subscription or shard actor (tests inject failures with middleware).
	SubscriptionProps func(*actor.Props) *actor.Props
	ShardProps        func(*actor.Props) *actor.Props
	ConnectionProps   func(*actor.Props) *actor.Props
	CatalogProps      func(*actor.Props) *actor.Props
	WriterProps       func(*actor.Props) *actor.Props
	// RequestTimeout bounds the node's internal requests (default 10 s).
	RequestTimeout time.Duration
	// Now is the clock batches are stamped with and retention compares
	// against; nil means time.Now. Tests inject one.
	Now func() time.Time
	// GroupNow and GroupAfterFunc are the consumer groups' clock (visibility
	// and session timeouts, poll waits); nil means real time. Tests inject
	// a fake clock.
	GroupNow       func() time.Time
	GroupAfterFunc func(time.Duration, func()) (stop func() bool)
	// TracerProvider, if set, receives the node's spans instead of the
	// exporter its config names (tests use an in-memory one). The node does
	// not shut it down.
	TracerProvider trace.TracerProvider
	// TraceStdout is where trace_exporter stdout writes (nil: os.Stdout).
	TraceStdout io.Writer
	// CoordinatorProps, if set, wraps group coordinator props.
	CoordinatorProps func(*actor.Props) *actor.Props
	// WrapMemoryLog and WrapDurableLog, if set, wrap the ephemeral and
	// durable logs (tests make storage stall with them).
	WrapMemoryLog  func(storage.Log) storage.Log
	WrapDurableLog func(storage.Log) storage.Log
	// DashboardTicks, if set, is when the dashboard samples (each value
	// received is the tick's time) instead of every second: tests tick it
	// by hand.
	DashboardTicks <-chan time.Time
}

// Node is a running Herald broker: storage, the actor tree, the QUIC
// listener and the HTTP listener. Start it with Start and stop it with
// Shutdown; a Node is not reusable.
type Node struct {
	cfg    Config
	logger *slog.Logger
	// auth authenticates every connection's Hello.
	auth   *actors.Authenticator
	nodeID string
	now    func() time.Time
	// stop is closed when Shutdown begins; background loops end on it.
	stop chan struct{}
	// stats are the actors' counters; metrics exports them.
	stats *actors.Stats
	// tracer starts the node's spans; ownTP is the provider the node built
	// from its config (flushed and shut down with the node).
	tracer *actors.Tracer
	ownTP  *sdktrace.TracerProvider
	// queueTotal and ringTotal are the node-wide byte budgets (nil: off).
	queueTotal, ringTotal *actors.Budget
	metrics               *nodeMetrics
	// dash is the dashboard on the HTTP listener (nil: off).
	dash *dashboard
	// deadLetters is the event-stream subscription that answers publishes
	// sent to a shard that is gone.
	deadLetters *eventstream.Subscription

	durable *storage.BadgerLog
	memory  *storage.MemoryLog
	// ephemeral is the log ephemeral streams use: memory, possibly wrapped.
	ephemeral storage.Log

	sys      *actor.ActorSystem
	root     *actor.PID
	children nodeChildren

	udp       net.PacketConn
	transport *quic.Transport
	// resetKey makes QUIC's stateless reset tokens. It is derived from the
	// node's stored secret, so a node restarted on its address and data dir
	// answers a packet of a connection from before the restart with a
	// stateless reset, and the client notices the loss at once instead of
	// after its idle timeout.
	resetKey quic.StatelessResetKey
	quicLn   *quic.Listener
	httpLn   net.Listener
	httpSrv  *http.Server
	caFile   string

	// ready is true while the node accepts work.
	ready atomic.Bool
	// stopping is set when Shutdown begins.
	stopping atomic.Bool
	// storageErr holds the error that broke storage, if any.
	storageErr atomic.Pointer[error]
	// wg tracks the accept loop and the HTTP server.
	wg sync.WaitGroup
	// goroutines are the actors' goroutines (connection readers, history
	// and group log reads): closeResources waits for them once the actors
	// have stopped, before storage closes.
	goroutines *actors.Goroutines
	// cluster is the node's side of its cluster (nil: a single node).
	cluster  *cluster
	shutOnce sync.Once
	shutErr  error
	// leadingAtStop is how many replicated shards this node still led
	// once its shutdown had handed leaderships over (-1 until a cluster
	// node's shutdown sets it).
	leadingAtStop atomic.Int64
}

// Start opens storage, builds the actor tree and starts listening. On error
// everything started so far is closed.
func Start(cfg Config, opts Options) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// n is not the named result: a failure returns nil, and the deferred
	// clean-up below still needs n.
	n := &Node{cfg: cfg, logger: opts.Logger, now: opts.Now, stop: make(chan struct{}), stats: &actors.Stats{},
		queueTotal: actors.NewBudget(cfg.SubscriberQueueMaxBytesTotal), ringTotal: actors.NewBudget(cfg.ReplayRingMaxBytesTotal),
		goroutines: &actors.Goroutines{}}
	n.leadingAtStop.Store(-1)
	if n.now == nil {
		n.now = time.Now
	}
	if n.logger == nil {
		n.logger = NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	}
	defer func() {
		if err != nil {
			n.stopping.Store(true)
			close(n.stop)
			_ = n.closeResources()
		}
	}()
	// The sockets first: a bad or busy address fails before the data
	// directory or a certificate is made.
	if err := n.bind(); err != nil {
		return nil, err
	}
	if err := n.bindCluster(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("node: data dir: %w", err)
	}
	if n.nodeID, err = loadNodeID(cfg.DataDir); err != nil {
		return nil, err
	}
	if n.cluster != nil {
		// In a cluster the node is known by its cluster id: a client that
		// is told another node leads a shard finds it by this id among the
		// nodes it dialled.
		n.nodeID = strconv.FormatUint(cfg.NodeID, 10)
	}
	tlsConf, err := n.serverTLS()
	if err != nil {
		return nil, err
	}
	if n.auth, err = newAuthenticator(cfg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if cfg.TLSClientCA != "" {
		if err := requireClientCerts(tlsConf, cfg.TLSClientCA, cfg.AuthTokensFile != ""); err != nil {
			return nil, err
		}
	}
	n.logAuth()
	if n.metrics, err = newNodeMetrics(n.stats); err != nil {
		return nil, err
	}
	if cfg.HTTP != "" && cfg.Dashboard {
		n.dash = newDashboard(n, opts.DashboardTicks)
	}
	tp, roots := opts.TracerProvider, cfg.TraceSampleRatio > 0
	if tp == nil {
		stdout := opts.TraceStdout
		if stdout == nil {
			stdout = os.Stdout
		}
		if n.ownTP, roots, err = newTracerProvider(context.Background(), cfg, n.nodeID, stdout, osGetenv); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		if n.ownTP != nil {
			tp = n.ownTP
			// The exporter's failures go to OpenTelemetry's error handler:
			// log when they begin, not only at shutdown.
			otel.SetErrorHandler(newExportErrorLog(n.logger, time.Minute, time.Now))
		}
	}
	n.tracer = actors.NewTracer(tp, roots)

	bo := storage.DefaultBadgerOptions(filepath.Join(cfg.DataDir, "badger"))
	bo.MemTableSize = cfg.Badger.MemTableSize
	bo.NumMemtables = cfg.Badger.NumMemtables
	bo.BlockCacheSize = cfg.Badger.BlockCacheSize
	bo.IndexCacheSize = cfg.Badger.IndexCacheSize
	bo.ValueLogFileSize = cfg.Badger.ValueLogFileSize
	bo.ValueThreshold = cfg.Badger.ValueThreshold
	bo.NumCompactors = cfg.Badger.NumCompactors
	bo.Logger = n.logger // the storage adapter adds component=badger
	openStart := time.Now()
	if n.durable, err = storage.OpenBadger(bo); err != nil {
		return nil, fmt.Errorf("node: open storage: %w", err)
	}
	secret, err := loadGroupSecret(n.durable)
	if err != nil {
		return nil, err
	}
	if n.cluster != nil {
		if err := claimClusterNodeID(n.durable, cfg.NodeID); err != nil {
			return nil, err
		}
	}
	n.resetKey = statelessResetKey(secret)
	if n.cluster != nil {
		n.cluster.resetKey = peerResetKey(secret)
	}
	n.memory = storage.NewMemoryLog(storage.MemoryOptions{MaxShardBytes: cfg.EphemeralShardMaxBytes})
	n.ephemeral = n.memory
	if opts.WrapMemoryLog != nil {
		n.ephemeral = opts.WrapMemoryLog(n.memory)
	}

	// protoactor logs every dead letter at info ("[DeadLetter]"): most are
	// notices to actors that just stopped, and they read like lost
	// messages. They are counted (herald_actor_dead_letters_total) and
	// logged at debug.
	actorLogger := slog.New(demoteHandler{Handler: n.logger.Handler(), message: "[DeadLetter]"}).With(slog.String("component", "actor"))
	sysOpts := []actor.ConfigOption{
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return actorLogger }),
		actor.WithDeadLetterThrottleCount(3),
		actor.WithDeadLetterThrottleInterval(time.Second),
		actor.WithDeadLetterRequestLogging(false),
		actor.WithDeveloperSupervisionLogging(false),
	}
	if cfg.ActorMetrics {
		// protoactor creates its instruments through the global meter
		// provider: point it at the node's.
		otel.SetMeterProvider(n.metrics.provider)
		sysOpts = append(sysOpts, actor.WithMetricProviders(n.metrics.provider))
	}
	n.sys = actor.NewActorSystem(sysOpts...)
	catalogCluster := n.clusterCatalog()
	var durable storage.Log = n.durable
	if opts.WrapDurableLog != nil {
		durable = opts.WrapDurableLog(n.durable)
	}
	sup := &nodeSupervisor{
		writer: actors.StorageWriterConfig{
			Tracer:     n.tracer,
			Log:        durable,
			Stats:      n.stats,
			Failed:     &n.storageErr,
			Goroutines: n.goroutines,
			OnFailure: func(err error) {
				n.storageErr.Store(&err)
				n.ready.Store(false)
				n.logger.Error("storage failed: the node refuses writes until restarted", slog.Any("error", err))
			},
		},
		catalog: actors.CatalogConfig{
			Goroutines:          n.goroutines,
			Tracer:              n.tracer,
			Durable:             durable,
			Memory:              n.ephemeral,
			Stats:               n.stats,
			QueueTotal:          n.queueTotal,
			RingTotal:           n.ringTotal,
			DefaultConfig:       wire.StreamConfig{Shards: 1, Durable: true},
			MaxStreamsPerTenant: cfg.MaxStreamsPerTenant,
			RingRecords:         cfg.ReplayRingRecords,
			MaxPending:          cfg.PubQueueDepth,
			PendingWait:         time.Duration(cfg.PublishQueueWaitTimeoutMillis) * time.Millisecond,
			RingBytes:           cfg.ReplayRingMaxBytes,
			ShardProps:          opts.ShardProps,
			Now:                 n.now,
			Cluster:             catalogCluster,
		},
		listener: actors.ConnectionConfig{
			Auth:                n.auth,
			MaxConnections:      cfg.MaxConnections,
			MaxSubscriptions:    cfg.MaxSubscriptionsPerConnection,
			Tracer:              n.tracer,
			NodeID:              n.nodeID,
			AutoCreate:          cfg.AutoCreateStreams,
			MaxFrameBytes:       cfg.MaxFrameBytes,
			PublishWindow:       cfg.PublishWindow,
			QueueCapacity:       cfg.SubscriberQueueCapacity,
			QueueCapacityMax:    cfg.SubscriberQueueCapacityMax,
			QueueMaxBytes:       cfg.SubscriberQueueMaxBytes,
			HandshakeTimeout:    cfg.HandshakeTimeout,
			ReadMaxRecords:      cfg.ReadMaxRecords,
			EgressMaxBytes:      cfg.SubscriberEgressMaxBytes,
			Stats:               n.stats,
			QueueTotal:          n.queueTotal,
			LaneBlock:           cfg.SubscriberLaneQueuePolicy == "block",
			EventBatchMaxEvents: cfg.EventBatchMaxEvents,
			EventBatchMaxBytes:  cfg.EventBatchMaxBytes,
			EventBatchMaxDelay:  time.Duration(cfg.EventBatchMaxDelayMicros) * time.Microsecond,
			RequestTimeout:      opts.RequestTimeout,
			ReadMaxBytes:        cfg.ReadMaxBytes,
			SubscriptionProps:   opts.SubscriptionProps,
			ConnectionProps:     opts.ConnectionProps,
			Goroutines:          n.goroutines,
			Relay:               n.groupRelay(),
			ClusterNodes:        n.clusterNodesFunc(),
		},
		groups: actors.GroupsConfig{
			Limits: actors.GroupLimits{
				Visibility:  cfg.GroupVisibilityTimeout,
				MaxAttempts: uint32(cfg.GroupMaxAttempts),
				Session:     cfg.GroupSessionTimeout,
				MaxInFlight: cfg.GroupMaxInFlight,
				MaxPoll:     cfg.GroupMaxPoll,
				MaxPollWait: cfg.GroupMaxPollWait,
				MaxWindow:   cfg.GroupMaxWindow,
			},
			MaxPerStream:     cfg.GroupMaxPerStream,
			Secret:           secret,
			MaxFrameBytes:    int(cfg.MaxFrameBytes),
			Now:              opts.GroupNow,
			AfterFunc:        opts.GroupAfterFunc,
			Stats:            n.stats,
			CoordinatorProps: opts.CoordinatorProps,
			Goroutines:       n.goroutines,
			Remote:           n.remoteShards(),
			Self:             n.cfg.NodeID,
		},
		wrapCatalog: opts.CatalogProps,
		wrapWriter:  opts.WriterProps,
		onChildStopped: func(name string) {
			if n.stopping.Load() {
				return
			}
			n.ready.Store(false)
			n.logger.Error("node: a core actor stopped after repeated failures; the node is not ready", slog.String("actor", name))
		},
	}
	props := newNodeSupervisorProps(sup)
	if n.tracer.Enabled() {
		// Every actor of the tree carries trace context on its messages.
		props = props.Configure(actor.WithSpawnMiddleware(n.tracer.Middleware()))
	}
	if n.root, err = n.sys.Root.SpawnNamed(props, "node"); err != nil {
		return nil, fmt.Errorf("node: spawn supervisor: %w", err)
	}
	res, err := n.sys.Root.RequestFuture(n.root, &childrenRequest{}, 30*time.Second).Result()
	if err != nil {
		return nil, fmt.Errorf("node: actor tree: %w", err)
	}
	n.children = *res.(*nodeChildren)
	n.deadLetters = n.sys.EventStream.Subscribe(n.onDeadLetter)

	if err := n.startCluster(); err != nil {
		return nil, err
	}
	if err := n.listen(tlsConf); err != nil {
		return nil, err
	}
	if n.dash != nil {
		n.dash.start()
	}
	n.ready.Store(true)
	build := ReadBuildInfo()
	n.logger.Info("herald node started",
		slog.String("version", build.Version), slog.String("revision", build.Revision), slog.String("go", build.GoVersion),
		slog.String("node_id", n.nodeID), slog.String("quic", n.Addr()), slog.String("http", n.HTTPAddr()),
		slog.String("data_dir", cfg.DataDir), slog.Duration("storage_open", time.Since(openStart)),
		slog.Bool("auto_create_streams", cfg.AutoCreateStreams))
	if rcv, snd, ok := udpBuffers(n.udp); ok {
		// quic-go asks for 7 MiB each way and warns (on its own log) only
		// when it got less; say what it got, since throughput under bursts
		// depends on it and net.core.rmem_max is the operator's to raise.
		n.logger.Info("udp socket buffers", slog.Int("receive_bytes", rcv), slog.Int("send_bytes", snd))
	}
	return n, nil
}

// NewLogger returns a slog logger writing text or JSON at level to w.
func NewLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	switch level {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		lv = slog.LevelInfo
	}
	o := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// loadNodeID reads the node id from DataDir/node-id, creating it once.
func loadNodeID(dir string) (string, error) {
	p := filepath.Join(dir, "node-id")
	if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(raw[:])
	if err := os.WriteFile(p, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("node: write node id: %w", err)
	}
	return id, nil
}

func (n *Node) serverTLS() (*tls.Config, error) {
	certFile, keyFile := n.cfg.TLSCert, n.cfg.TLSKey
	if certFile == "" {
		host, _, _ := net.SplitHostPort(n.cfg.Listen)
		dev, err := transport.EnsureDevCertificates(transport.DevCertificatesDir(n.cfg.DataDir), []string{host})
		if err != nil {
			return nil, fmt.Errorf("node: development certificates: %w", err)
		}
		certFile, keyFile, n.caFile = dev.CertFile, dev.KeyFile, dev.CAFile
		n.logger.Info("using generated development certificates; clients trust them with --ca "+dev.CAFile,
			slog.String("ca", dev.CAFile))
	}
	return transport.ServerTLSConfig(certFile, keyFile)
}

// bind opens the node's sockets: QUIC's UDP socket and the HTTP listener.
func (n *Node) bind() error {
	udpAddr, err := net.ResolveUDPAddr("udp", n.cfg.Listen)
	if err != nil {
		return fmt.Errorf("node: listen address %q: %w", n.cfg.Listen, err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		return fmt.Errorf("node: listen %s: %w", n.cfg.Listen, err)
	}
	n.udp = udp // not on error: a nil *UDPConn in the interface is not nil
	if n.cfg.HTTP != "" {
		ln, err := net.Listen("tcp", n.cfg.HTTP)
		if err != nil {
			return fmt.Errorf("node: http listen %s: %w", n.cfg.HTTP, err)
		}
		n.httpLn = ln
	}
	return nil
}

// listen serves QUIC and HTTP on the bound sockets.
func (n *Node) listen(tlsConf *tls.Config) error {
	var err error
	n.transport = &quic.Transport{Conn: n.udp, StatelessResetKey: &n.resetKey}
	n.quicLn, err = n.transport.Listen(tlsConf, &quic.Config{
		HandshakeIdleTimeout:  n.cfg.HandshakeTimeout,
		MaxIdleTimeout:        n.cfg.IdleTimeout,
		MaxIncomingStreams:    int64(n.cfg.MaxStreamsPerConnection),
		MaxIncomingUniStreams: -1,
	})
	if err != nil {
		return fmt.Errorf("node: quic listen: %w", err)
	}
	if n.httpLn != nil {
		n.httpSrv = &http.Server{Handler: n.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.httpSrv.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.logger.Error("http server failed", slog.Any("error", err))
			}
		}()
	}
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.acceptLoop()
	}()
	go func() {
		defer n.wg.Done()
		n.retentionLoop()
	}()
	return nil
}

// onDeadLetter answers a publish that reached a shard that is gone (its
// stream was deleted after the connection looked it up): the publisher gets
// stream_not_found instead of waiting forever. A group request that reached
// a coordinator that is gone is answered shutting_down (retryable).
func (n *Node) onDeadLetter(evt any) {
	dl, ok := evt.(*actor.DeadLetterEvent)
	if !ok {
		return
	}
	n.stats.DeadLetters.Add(1)
	// A traced message travels in an envelope.
	switch m := actor.UnwrapEnvelopeMessage(dl.Message).(type) {
	case *actors.PublishRequest:
		if m.ReplyTo != nil {
			n.sys.Root.Send(m.ReplyTo, &actors.PublishRejected{ReqID: m.ReqID, Ack: m.Ack,
				Err: wire.Errorf(wire.CodeStreamNotFound, "the stream was deleted")})
		}
	default:
		// A group request whose coordinator had just stopped (its stream
		// was deleted, or the node is stopping).
		actors.AnswerLostGroupRequest(n.sys, m, wire.Errorf(wire.CodeShuttingDown, "the consumer group's coordinator stopped; retry"))
	}
}

// retentionLoop enforces retention every retention_check_interval until the
// node stops.
func (n *Node) retentionLoop() {
	t := time.NewTicker(n.cfg.RetentionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			if err := n.ApplyRetention(); err != nil {
				n.logger.Error("retention pass failed", slog.Any("error", err))
			}
		}
	}
}

// ApplyRetention runs one retention pass now: for every stream with a
// retention age or byte bound, each shard's oldest whole batches past the
// bound are deleted and the shard is told its new first offset. The node
// runs it every retention_check_interval; tests call it directly with an
// injected clock.
func (n *Node) ApplyRetention() error {
	res, err := n.sys.Root.RequestFuture(n.children.Catalog, &actors.AllStreamsRequest{}, 10*time.Second).Result()
	if err != nil {
		return fmt.Errorf("retention: catalog: %w", err)
	}
	now := n.now()
	var errs []error
	for _, h := range res.(*actors.AllStreamsResponse).Streams {
		policy := storage.RetentionPolicy{
			MaxAge:   time.Duration(h.Config.RetentionAgeMillis) * time.Millisecond,
			MaxBytes: int64(min(h.Config.RetentionBytes, 1<<62)),
		}
		if policy.MaxAge == 0 && policy.MaxBytes == 0 {
			continue
		}
		for i, pid := range h.Shards {
			r, err := h.Log.Retain(h.ShardKey(uint32(i)), policy, now)
			if err != nil {
				errs = append(errs, fmt.Errorf("retention %s/%d: %w", h.Name, i, err))
				continue
			}
			if r.DeletedBatches > 0 {
				n.sys.Root.Send(pid, &actors.RetentionApplied{First: r.First})
				n.logger.Debug("retention deleted batches", slog.String("stream", h.Name.String()), slog.Int("shard", i),
					slog.Int("batches", r.DeletedBatches), slog.Int64("bytes", r.DeletedBytes), slog.Uint64("first", r.First))
			}
		}
	}
	return errors.Join(errs...)
}

func (n *Node) acceptLoop() {
	for {
		conn, err := n.quicLn.Accept(context.Background())
		if err != nil {
			return // the listener was closed
		}
		n.sys.Root.Send(n.children.Listener, &actors.ConnectionAccepted{Conn: conn})
	}
}

func (n *Node) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", n.metrics.handler)
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/cluster", n.serveCluster)
	mux.HandleFunc("/cluster/drain", n.serveClusterChange(actors.ClusterDrain))
	mux.HandleFunc("/cluster/undrain", n.serveClusterChange(actors.ClusterUndrain))
	mux.HandleFunc("/cluster/add", n.serveClusterChange(actors.ClusterAdd))
	mux.HandleFunc("/cluster/remove", n.serveClusterChange(actors.ClusterRemove))
	mux.HandleFunc("/streams/describe", n.serveDescribe)
	if n.dash != nil {
		n.dash.routes(mux)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !n.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			if p := n.storageErr.Load(); p != nil {
				_, _ = fmt.Fprintf(w, "not ready: storage failed: %v\n", *p)
				return
			}
			_, _ = io.WriteString(w, "not ready\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// Addr returns the QUIC listen address (useful with port 0).
func (n *Node) Addr() string {
	if n.udp == nil {
		return ""
	}
	return n.udp.LocalAddr().String()
}

// HTTPAddr returns the HTTP listen address, or "" when HTTP is off.
func (n *Node) HTTPAddr() string {
	if n.httpLn == nil {
		return ""
	}
	return n.httpLn.Addr().String()
}

// CAFile returns the generated development CA, or "" when the node was
// given its own certificate.
func (n *Node) CAFile() string { return n.caFile }

// NodeID returns the node's persistent id.
func (n *Node) NodeID() string { return n.nodeID }

// Ready reports whether the node accepts work.
func (n *Node) Ready() bool { return n.ready.Load() }

// Shutdown drains and stops the node: it stops accepting connections, tells
// clients it is draining (GoAway; new publishes get CodeShuttingDown), lets
// every publish already admitted commit and its ack reach the client, stops
// the actors (connections, then shards, then the storage writer, which
// commits what is left), syncs and closes storage. ctx bounds the drain;
// once it expires the rest is stopped without waiting. Shutdown is
// idempotent.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutOnce.Do(func() { n.shutErr = n.shutdown(ctx) })
	return n.shutErr
}

func (n *Node) shutdown(ctx context.Context) error {
	n.stopping.Store(true)
	close(n.stop)
	n.ready.Store(false)
	n.logger.Info("herald node shutting down")
	if n.quicLn != nil {
		_ = n.quicLn.Close() // stop accepting; open connections stay
	}
	// Leaderships first, while the connections still serve: publishes go
	// to the new leaders rather than wait for an election.
	n.handOffLeadership(ctx)
	start := time.Now()
	n.drain(ctx)
	n.logger.Debug("drain finished", slog.Duration("took", time.Since(start)))
	if err := n.closeResources(); err != nil {
		n.logger.Error("herald node stopped with an error", slog.Any("error", err))
		return err
	}
	n.logger.Info("herald node stopped")
	return nil
}

// drain waits, within ctx, until what was admitted before the drain has been
// committed and answered. Each barrier is a request every actor answers in
// microseconds; one that is itself stopping (a connection whose client just
// left) may never answer, so each wait is capped at drainStepTimeout and the
// requests of one barrier are issued together.
func (n *Node) drain(ctx context.Context) {
	if n.sys == nil || n.children.Listener == nil {
		return
	}
	root := n.sys.Root
	timeout := func() time.Duration {
		d := drainStepTimeout
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, max(time.Until(dl), time.Millisecond))
		}
		return d
	}
	all := func(pids []*actor.PID, msg any) []any {
		futures := make([]*actor.Future, len(pids))
		for i, p := range pids {
			futures[i] = root.RequestFuture(p, msg, timeout())
		}
		out := make([]any, 0, len(pids))
		for _, f := range futures {
			if r, err := f.Result(); err == nil {
				out = append(out, r)
			}
		}
		return out
	}
	root.Send(n.children.Listener, &actors.Drain{})
	// Barrier 1: the listener has told every connection (publishes that
	// arrive after this are refused).
	res, err := root.RequestFuture(n.children.Listener, &actors.ConnectionsRequest{}, timeout()).Result()
	if err != nil {
		return
	}
	var lanes []*actor.PID
	for _, r := range all(res.(*actors.ConnectionsResponse).Connections, &actors.LanesRequest{}) {
		lanes = append(lanes, r.(*actors.LanesResponse).Lanes...)
	}
	// Barrier 2: every shard has handled the publishes sent to it before
	// the drain (and handed durable ones to the storage writer).
	var shards []*actor.PID
	if r, err := root.RequestFuture(n.children.Catalog, &actors.AllShardsRequest{}, timeout()).Result(); err == nil {
		shards = r.(*actors.AllShardsResponse).Shards
	}
	all(shards, &actors.ShardInfoRequest{})
	// Barrier 3: everything the shards handed the storage writer is durable.
	if _, err := root.RequestFuture(n.children.Writer, &actors.MetaWriteRequest{}, timeout()).Result(); err != nil {
		return
	}
	// Barrier 4: every shard has processed its commits (and sent the acks).
	all(shards, &actors.ShardInfoRequest{})
	// Barrier 5: every lane has written what it was given.
	all(lanes, &actors.LaneSyncRequest{})
	// Last, the clients: what the lanes wrote may still sit in QUIC's send
	// buffers, which closing a connection discards. A client closes its
	// connection once its in-flight publishes are answered (it has had
	// GoAway since barrier 1), so wait for that, up to drain_grace.
	n.awaitClientsGone(ctx)
}

// awaitClientsGone waits until the listener has no connections left, up to
// drain_grace (and ctx's deadline).
func (n *Node) awaitClientsGone(ctx context.Context) {
	deadline := time.Now().Add(n.cfg.DrainGrace)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		wait := min(drainStepTimeout, max(time.Until(deadline), time.Millisecond))
		res, err := n.sys.Root.RequestFuture(n.children.Listener, &actors.ConnectionsRequest{}, wait).Result()
		if err != nil || len(res.(*actors.ConnectionsResponse).Connections) == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
	if ctx.Err() != nil {
		n.logger.Info("shutdown timeout reached: closing the connections clients left open")
		return
	}
	n.logger.Info("drain grace over: closing the connections clients left open")
}

// drainStepTimeout caps each drain barrier's wait.
const drainStepTimeout = 2 * time.Second

// closeResources stops everything that was started, in dependency order,
// and reports a failure to sync or close storage.
func (n *Node) closeResources() error {
	if n.sys != nil && n.root != nil {
		stop := func(pid *actor.PID) {
			if pid != nil {
				start := time.Now()
				_ = n.sys.Root.StopFuture(pid).Wait()
				n.logger.Debug("actor stopped", slog.String("actor", pid.Id), slog.Duration("took", time.Since(start)))
			}
		}
		stop(n.children.Listener) // connections, subscriptions and group members
		stop(n.children.Groups)   // coordinators hand their last state to the writer
		stop(n.children.Catalog)  // shards
		stop(n.children.Writer)   // commits what is still pending
		stop(n.root)
	}
	n.stopCluster() // the peer links, then their socket
	// The stopped actors have cancelled what their goroutines wait on.
	n.goroutines.CloseAndWait()
	if n.sys != nil {
		if n.deadLetters != nil {
			n.sys.EventStream.Unsubscribe(n.deadLetters)
		}
		n.sys.Shutdown()
	}
	if n.quicLn != nil {
		_ = n.quicLn.Close()
	}
	if n.transport != nil {
		_ = n.transport.Close()
	}
	if n.udp != nil {
		_ = n.udp.Close()
	}
	if n.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if n.httpSrv.Shutdown(ctx) != nil {
			// A handler still running (a client that stopped reading an
			// event stream): close its connection so it ends.
			_ = n.httpSrv.Close()
		}
		cancel()
	} else if n.httpLn != nil {
		_ = n.httpLn.Close()
	}
	n.wg.Wait()
	var errs []error
	if n.durable != nil {
		if err := n.durable.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("storage sync at shutdown: %w", err))
		}
		if err := n.durable.Close(); err != nil {
			errs = append(errs, fmt.Errorf("storage close: %w", err))
		}
	}
	if n.memory != nil {
		_ = n.memory.Close()
	}
	if n.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = n.metrics.shutdown(ctx)
		cancel()
	}
	if n.ownTP != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.ownTP.Shutdown(ctx); err != nil {
			n.logger.Warn("trace exporter: flushing on shutdown failed", slog.Any("error", err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// groupSecretKey is the metadata key of the secret that signs group cursors.
var groupSecretKey = []byte("node/group_secret")

// loadGroupSecret returns the node's cursor-signing secret, creating it on
// first start. It is kept in the durable log so cursors handed out before a
// restart are still recognised as this node's (and then found stale, not
// forged).
func loadGroupSecret(log storage.Log) ([]byte, error) {
	v, err := log.GetMeta(groupSecretKey)
	if err == nil && len(v) == 32 {
		return v, nil
	}
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return nil, fmt.Errorf("node: group secret: %w", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("node: group secret: %w", err)
	}
	if err := log.Commit(nil, []storage.MetaPut{{Key: groupSecretKey, Value: secret}}); err != nil {
		return nil, fmt.Errorf("node: group secret: %w", err)
	}
	return secret, nil
}

// statelessResetKey derives the QUIC stateless reset key from the node's
// secret (which stays secret: the key is a one-way function of it, under a
// label of its own).
func statelessResetKey(secret []byte) quic.StatelessResetKey {
	return quic.StatelessResetKey(sha256.Sum256(append([]byte("herald/quic-stateless-reset\x00"), secret...)))
}

// peerResetKey is the peer transport's stateless reset key: a node
// restarted on its cluster address answers a peer still sending on the
// connection from before the restart with a reset, so the peer drops it
// and dials again at once (the lower id dials), rather than after the
// connection's idle timeout: a restarted node is back in its raft groups
// within a heartbeat or two.
func peerResetKey(secret []byte) quic.StatelessResetKey {
	return quic.StatelessResetKey(sha256.Sum256(append([]byte("herald/peer-stateless-reset\x00"), secret...)))
}

// demoteHandler logs records whose message is message at debug level,
// passing every other record through.
type demoteHandler struct {
	slog.Handler
	message string
}

// Enabled implements slog.Handler: a record that may be demoted is built,
// and Handle decides.
func (h demoteHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, l) || h.Handler.Enabled(ctx, slog.LevelDebug)
}

// Handle implements slog.Handler.
func (h demoteHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.message {
		r.Level = slog.LevelDebug
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h demoteHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoteHandler{Handler: h.Handler.WithAttrs(attrs), message: h.message}
}

// WithGroup implements slog.Handler.
func (h demoteHandler) WithGroup(name string) slog.Handler {
	return demoteHandler{Handler: h.Handler.WithGroup(name), message: h.message}
}
