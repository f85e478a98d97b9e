package client

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	cmap "github.com/orcaman/concurrent-map"
)

// registryBuckets is how many buckets a client's actor registry has.
// protoactor sizes its registry for a node: 1024 buckets of 32 locked maps,
// about 56,000 live objects and 2.4 MB made by every actor system. A
// client holds a connection actor and an actor per open subscription,
// publish stream or group member, so a few buckets do. In a process with
// many clients (a bench with one per subscriber connection, a service
// with a client per tenant) the collector scanned every client's registry
// at every cycle: with 21 clients it was 1.2 million of the process's
// live objects.
const registryBuckets = 4

// newActorSystem makes a client's actor system, its registry shrunk to
// registryBuckets before any actor is spawned.
func newActorSystem(logger *slog.Logger) *actor.ActorSystem {
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger.With("component", "protoactor") }),
		actor.WithDeadLetterRequestLogging(false),
		actor.WithDeveloperSupervisionLogging(false),
	)
	shrinkRegistry(sys.ProcessRegistry, registryBuckets)
	return sys
}

// shrinkRegistry moves what reg holds (the system's own processes: its
// dead letters and event stream) into a registry of n buckets, and makes
// that reg's. It must run before anything else uses reg: at the system's
// creation no other goroutine does.
func shrinkRegistry(reg *actor.ProcessRegistryValue, n int) {
	small := &actor.SliceMap{LocalPIDs: make([]cmap.ConcurrentMap, n)}
	for i := range small.LocalPIDs {
		small.LocalPIDs[i] = cmap.New()
	}
	for _, bucket := range reg.LocalPIDs.LocalPIDs {
		// IterCb, not Items: Items starts a goroutine per shard.
		bucket.IterCb(func(id string, p any) { small.GetBucket(id).Set(id, p) })
	}
	reg.LocalPIDs = small
}
