package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/heraldmq/herald/client"
)

// replicaFlag is --replica: which replica of a replicated shard serves
// `herald sub` and `herald read` (client.WithReplica).
type replicaFlag client.Replica

func (v *replicaFlag) String() string { return client.Replica(*v).String() }

// Type names the value in usage text.
func (v *replicaFlag) Type() string { return "nearest|leader" }

func (v *replicaFlag) Set(s string) error {
	switch s {
	case "nearest":
		*v = replicaFlag(client.ReplicaNearest)
	case "leader":
		*v = replicaFlag(client.ReplicaLeader)
	default:
		return fmt.Errorf("%q: want nearest or leader", s)
	}
	return nil
}

// replicaHelp is what --replica does, for the help of sub and read.
const replicaHelp = `--replica says which replica of a replicated stream's shard serves: nearest (the default)
is the node --server names (with several, the first that answers and holds a replica of
the shard), leader or follower; a follower serves committed records only, and one behind its
leader (cut off from it, or too far behind) says so and the command goes on at another node.
leader reads from the shard's leader only. With several --server addresses the command
follows the cluster: it goes where a node says the shard is, and on to another replica when
a node is lost, with no gap and no duplicate.`

// addReplicaFlag registers --replica on c, setting conn's choice.
func addReplicaFlag(c *cobra.Command, conn *clientFlags) {
	c.Flags().Var((*replicaFlag)(&conn.replica), "replica", "which replica serves: nearest (the node reached) or leader")
	completeWords(c, "replica", "nearest", "leader")
}

// subscription is what `herald sub` reads: a Client's subscription, or a
// ClusterClient's.
type subscription interface {
	Next(ctx context.Context) (client.Event, error)
	Close() error
}
