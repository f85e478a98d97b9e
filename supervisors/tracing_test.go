package supervisors

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldmq/herald/client"
)

// One publish, one subscriber, one group member: the spans of the client,
// the node's actors and both consumers form one trace, with the expected
// names, kinds and parents.
func TestTraceFromPublisherToConsumers(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) { o.TracerProvider = tp })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(t, n, client.WithTracerProvider(tp))
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "orders"}
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, stream, client.WithStartEarliest())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	gs, err := c.Group(stream, "workers").Subscribe(ctx, client.WithMember("m1"))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	mem.Reset()

	if _, err := c.Publish(ctx, stream, []byte("order-1")); err != nil {
		t.Fatal(err)
	}
	ev, err := sub.Next(ctx)
	if err != nil || !ev.Trace.IsValid() {
		t.Fatalf("subscriber: %+v %v", ev.Trace, err)
	}
	d, err := gs.Next(ctx)
	if err != nil || !d.Trace.IsValid() {
		t.Fatalf("member: %+v %v", d.Trace, err)
	}
	if err := gs.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}

	type want struct {
		name, parent string
		kind         trace.SpanKind
		count        int
	}
	wants := []want{
		{"publish acme/shop/orders", "", trace.SpanKindProducer, 1},
		{"herald.publish.receive", "publish acme/shop/orders", trace.SpanKindServer, 1},
		{"actor PublishRequest", "herald.publish.receive", trace.SpanKindInternal, 1},
		{"herald.shard.append", "actor PublishRequest", trace.SpanKindInternal, 1},
		{"actor AppendRequest", "herald.shard.append", trace.SpanKindInternal, 1},
		{"herald.storage.commit", "actor AppendRequest", trace.SpanKindInternal, 1},
		{"receive acme/shop/orders", "publish acme/shop/orders", trace.SpanKindConsumer, 2},
		{"settle acme/shop/orders", "receive acme/shop/orders", trace.SpanKindClient, 1},
	}
	var spans tracetest.SpanStubs
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans = mem.GetSpans()
		byName := map[string]int{}
		for _, s := range spans {
			byName[s.Name]++
		}
		ok := true
		for _, w := range wants {
			if byName[w.name] < w.count {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans after 10 s: %v", byName)
		}
		time.Sleep(10 * time.Millisecond)
	}
	root := spans[0].SpanContext.TraceID()
	ids := map[trace.SpanID]string{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = s.Name
		if s.SpanContext.TraceID() != root {
			t.Errorf("span %q is in trace %s, not %s", s.Name, s.SpanContext.TraceID(), root)
		}
	}
	for _, w := range wants {
		found := 0
		for _, s := range spans {
			if s.Name != w.name {
				continue
			}
			found++
			if s.SpanKind != w.kind {
				t.Errorf("%q is %v, want %v", s.Name, s.SpanKind, w.kind)
			}
			parent := ""
			if s.Parent.IsValid() {
				parent = ids[s.Parent.SpanID()]
			}
			if parent != w.parent {
				t.Errorf("%q has parent %q, want %q", s.Name, parent, w.parent)
			}
		}
		if found != w.count {
			t.Errorf("%d spans %q, want %d", found, w.name, w.count)
		}
	}
	// Hops describe what they carried.
	attr := func(name, key string) (int64, bool) {
		for _, s := range spans {
			if s.Name != name {
				continue
			}
			for _, a := range s.Attributes {
				if string(a.Key) == key {
					return a.Value.AsInt64(), true
				}
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		span, key string
		want      int64
	}{
		{"herald.shard.append", "herald.offset", 0}, {"herald.shard.append", "herald.batch.records", 1},
		{"herald.shard.append", "herald.shard.pending", 0}, {"actor SectionsPushed", "herald.batch.records", 1},
		{"actor GroupClaimGranted", "herald.group.records", 1},
	} {
		if v, ok := attr(c.span, c.key); !ok || v != c.want {
			t.Errorf("%s %s = %d (present %v), want %d", c.span, c.key, v, ok, c.want)
		}
	}
	if t.Failed() || testing.Verbose() {
		for _, s := range spans {
			t.Logf("%s parent=%s kind=%v", s.Name, ids[s.Parent.SpanID()], s.SpanKind)
		}
	}
}

// A group delivery of several records is one consumer span in a trace of
// its own, with a link to each record's publish span; its ack is in that
// trace.
func TestTraceGroupBatchLinksItsRecords(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	n := testNode(t, t.TempDir(), func(_ *Config, o *Options) { o.TracerProvider = tp })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialClient(t, n, client.WithTracerProvider(tp))
	stream := client.StreamName{Tenant: "acme", Namespace: "shop", Stream: "batch"}
	if _, err := c.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		if _, err := c.Publish(ctx, stream, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	gs, err := c.Group(stream, "g").Subscribe(ctx, client.WithMember("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	d, err := gs.Next(ctx)
	if err != nil || len(d.Records) != 2 {
		t.Fatalf("delivery: %d records, %v", len(d.Records), err)
	}
	if err := gs.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
	publishes := map[trace.SpanID]bool{}
	var receive, settle *tracetest.SpanStub
	for _, s := range mem.GetSpans() {
		switch s.Name {
		case "publish acme/shop/batch":
			publishes[s.SpanContext.SpanID()] = true
		case "receive acme/shop/batch":
			receive = &s
		case "settle acme/shop/batch":
			settle = &s
		}
	}
	if len(publishes) != 2 || receive == nil || settle == nil {
		t.Fatalf("publishes %d, receive %v, settle %v", len(publishes), receive != nil, settle != nil)
	}
	if receive.Parent.IsValid() || receive.SpanKind != trace.SpanKindConsumer {
		t.Errorf("batch receive: parent %v kind %v, want a consumer root", receive.Parent, receive.SpanKind)
	}
	linked := 0
	for _, l := range receive.Links {
		if publishes[l.SpanContext.SpanID()] {
			linked++
		}
	}
	if linked != 2 {
		t.Errorf("batch receive links %d publish spans, want 2", linked)
	}
	if settle.Parent.SpanID() != receive.SpanContext.SpanID() {
		t.Errorf("the ack's span is not in the delivery's trace")
	}
}
