package client

import (
	"errors"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// TestStreamConfigRoundTrip: every config field travels to the node and
// comes back in StreamInfo.
func TestStreamConfigRoundTrip(t *testing.T) {
	srv := newTestServer(t)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	cfg := StreamConfig{Shards: 4, Durable: true, Routing: RoutingJump, Overflow: OverflowBlock,
		QueueCapacity: 256, QueueMaxBytes: 8 << 20, RetentionAge: 36 * time.Hour, RetentionBytes: 1 << 30}
	info, err := c.CreateStream(ctx, orders, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config != cfg || len(info.Tails) != 4 {
		t.Fatalf("created %+v, want %+v", info, cfg)
	}
	got, err := c.DescribeStream(ctx, orders)
	if err != nil || got.Config != cfg {
		t.Fatalf("described %+v, %v", got, err)
	}
	srv.cat.Lock()
	wc := srv.cat.streams[orders].Config
	srv.cat.Unlock()
	want := wire.StreamConfig{Shards: 4, Durable: true, Routing: wire.RoutingJump, Overflow: wire.OverflowBlock,
		QueueCapacity: 256, QueueMaxBytes: 8 << 20, RetentionAgeMillis: 36 * 3600 * 1000, RetentionBytes: 1 << 30}
	if wc != want {
		t.Fatalf("the node got %+v, want %+v", wc, want)
	}
	list, err := c.ListStreams(ctx, orders.Tenant, orders.Namespace)
	if err != nil || len(list) != 1 || list[0].Config != cfg {
		t.Fatalf("listed %+v, %v", list, err)
	}

	// Defaults: one shard, and a sub-millisecond age rounds up, not to
	// "forever".
	other := StreamName{Tenant: "acme", Namespace: "shop", Stream: "other"}
	info, err = c.CreateStream(ctx, other, StreamConfig{RetentionAge: time.Microsecond})
	if err != nil || info.Config != (StreamConfig{Shards: 1, RetentionAge: time.Millisecond}) {
		t.Fatalf("created %+v, %v", info.Config, err)
	}

	for _, bad := range []StreamConfig{
		{Shards: -1},
		{Routing: 7},
		{Overflow: 3},
		{QueueCapacity: -1},
		{QueueMaxBytes: -1},
		{RetentionAge: -time.Second},
		{RetentionBytes: -1},
	} {
		if _, err := c.CreateStream(ctx, orders, bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("CreateStream(%+v): %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// TestDeleteStream: the node answers OK; the client forgets the stream's
// shards, so the next publish describes it again.
func TestDeleteStream(t *testing.T) {
	srv := newTestServer(t)
	frames := publishNode(t, srv)
	srv.start()
	c := srv.dial(t)
	ctx := testCtx(t)

	go func() { recv(t, frames).ack(t, 0, 0) }()
	if _, err := c.Publish(ctx, orders, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteStream(ctx, orders); err != nil {
		t.Fatalf("DeleteStream: %v", err)
	}
	if err := c.DeleteStream(ctx, orders); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("second DeleteStream: %v, want ErrStreamNotFound", err)
	}
	if _, err := c.DescribeStream(ctx, orders); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("DescribeStream after delete: %v", err)
	}
	// The next publish does not trust the old description: it describes,
	// learns the stream is gone and lets the node decide (AnyShard).
	go func() {
		f := recv(t, frames)
		if f.p.Shard != wire.AnyShard {
			t.Errorf("publish after delete to shard %d, want AnyShard", f.p.Shard)
		}
		_, _ = f.st.Write(wire.AppendError(nil, f.h.RequestID, wire.Errorf(wire.CodeStreamNotFound, "deleted")))
	}()
	if _, err := c.Publish(ctx, orders, []byte("y")); !errors.Is(err, ErrStreamNotFound) {
		t.Fatalf("publish after delete: %v, want ErrStreamNotFound", err)
	}
}
