package client

import (
	"context"
	"errors"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// Group requests to a cluster go to the node that coordinates the group
// (the leader of its stream's shard 0), through whichever node the client
// is connected to. While the groups' coordinator moves (a failover, a
// leadership handed over), or while no leader is known yet, the node
// answers not_leader: the request was not applied, and is sent again after
// a pause that grows from groupRetryMin to groupRetryMax, until it is
// answered otherwise or ctx ends.
const (
	groupRetryMin = 20 * time.Millisecond
	groupRetryMax = time.Second
)

// groupCall is call for a group request: a not_leader answer is retried.
func (c *Client) groupCall(ctx context.Context, want wire.Type, safe bool, build func(dst []byte, id uint64) []byte) (any, error) {
	pause := groupRetryMin
	for {
		v, err := c.call(ctx, want, safe, build)
		var we *wire.Error
		if err == nil || !errors.As(err, &we) || we.Code != wire.CodeNotLeader {
			return v, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-c.connStopped:
			t.Stop()
			return nil, err
		case <-t.C:
		}
		pause = min(2*pause, groupRetryMax)
	}
}
