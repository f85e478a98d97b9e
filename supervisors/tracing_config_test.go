package supervisors

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The trace exporter comes from the config key or, without it, from the
// standard OTEL_* variables; OTLP builds for both protocols without
// connecting anywhere.
func TestTracerProviderFromConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name     string
		exporter string
		protocol string
		vars     map[string]string
		on       bool
		err      string
	}{
		{name: "default off", on: false},
		{name: "none", exporter: "none", on: false},
		{name: "stdout", exporter: "stdout", on: true},
		{name: "env console", vars: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true},
		{name: "env none", vars: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, on: false},
		{name: "otlp http", exporter: "otlp", on: true},
		{name: "otlp grpc", exporter: "otlp", protocol: "grpc", on: true},
		{name: "env otlp grpc", vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{name: "env bad protocol", vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}, err: "trace_otlp_protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.TraceExporter, cfg.TraceOTLPProtocol = tc.exporter, tc.protocol
			var out bytes.Buffer
			tp, _, err := newTracerProvider(context.Background(), cfg, "n1", &out, env(tc.vars))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tp != nil) != tc.on {
				t.Fatalf("provider %v, want on=%v", tp, tc.on)
			}
			if tp != nil {
				if err := tp.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	cfg := DefaultConfig()
	cfg.TraceExporter = "jaeger-thrift"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "trace_exporter") {
		t.Fatalf("bad trace_exporter: %v", err)
	}
}
