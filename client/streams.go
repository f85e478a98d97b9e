package client

import (
	"context"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

// StreamName names a stream: tenant, namespace and stream, each 1–64 bytes
// of [A-Za-z0-9._-]. String gives "tenant/namespace/stream".
type StreamName = wire.StreamName

// ParseStreamName parses "stream", "namespace/stream" or
// "tenant/namespace/stream"; missing parts are "default", so "orders" is
// default/default/orders. It returns an ErrInvalidStreamName error for a bad
// name.
func ParseStreamName(s string) (StreamName, error) { return wire.ParseStreamName(s) }

// StreamConfig is a stream's configuration.
type StreamConfig struct {
	// Shards is the number of shards; 0 means 1.
	Shards int
	// Durable streams are written to disk and survive restarts; ephemeral
	// ones live in memory.
	Durable bool
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Name   StreamName
	Config StreamConfig
	// Created is when the stream was created.
	Created time.Time
	// Tails holds each shard's tail: the offset its next record will get.
	Tails []uint64
}

func infoFromWire(i wire.StreamInfo) StreamInfo {
	return StreamInfo{
		Name:    i.Name,
		Config:  StreamConfig{Shards: int(i.Config.Shards), Durable: i.Config.Durable},
		Created: time.Unix(0, i.CreatedUnixNano),
		Tails:   i.Tails,
	}
}

// CreateStream creates the stream name with cfg and returns its info.
// Creating a stream that exists with the same config succeeds; with another
// config it fails with ErrStreamExists.
func (c *Client) CreateStream(ctx context.Context, name StreamName, cfg StreamConfig) (StreamInfo, error) {
	if err := name.Validate(); err != nil {
		return StreamInfo{}, err
	}
	if cfg.Shards < 0 || int64(cfg.Shards) > 1<<32-1 {
		return StreamInfo{}, wire.Errorf(wire.CodeInvalidConfig, "shards %d out of range", cfg.Shards)
	}
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	req := wire.CreateStream{Name: name, Config: wire.StreamConfig{Shards: uint32(cfg.Shards), Durable: cfg.Durable}}
	v, err := c.call(ctx, wire.TypeStreamInfo, func(dst []byte, id uint64) []byte {
		return wire.AppendCreateStream(dst, id, req)
	})
	if err != nil {
		return StreamInfo{}, err
	}
	return infoFromWire(v.(wire.StreamInfo)), nil
}

// DescribeStream returns the info of the stream name, or ErrStreamNotFound.
func (c *Client) DescribeStream(ctx context.Context, name StreamName) (StreamInfo, error) {
	if err := name.Validate(); err != nil {
		return StreamInfo{}, err
	}
	v, err := c.call(ctx, wire.TypeStreamInfo, func(dst []byte, id uint64) []byte {
		return wire.AppendDescribeStream(dst, id, name)
	})
	if err != nil {
		return StreamInfo{}, err
	}
	return infoFromWire(v.(wire.StreamInfo)), nil
}

// ListStreams returns the streams of tenant ("" means "default"), of one
// namespace or, when namespace is "", of all of them.
func (c *Client) ListStreams(ctx context.Context, tenant, namespace string) ([]StreamInfo, error) {
	if tenant == "" {
		tenant = "default"
	}
	req := wire.ListStreams{Tenant: tenant, Namespace: namespace}
	v, err := c.call(ctx, wire.TypeStreamList, func(dst []byte, id uint64) []byte {
		return wire.AppendListStreams(dst, id, req)
	})
	if err != nil {
		return nil, err
	}
	list := v.([]wire.StreamInfo)
	out := make([]StreamInfo, len(list))
	for i, info := range list {
		out[i] = infoFromWire(info)
	}
	return out, nil
}
