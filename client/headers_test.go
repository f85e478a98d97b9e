package client

import (
	"fmt"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

func TestHeadersGet(t *testing.T) {
	h := Headers{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}, {Key: "a", Value: []byte("3")}}
	for _, tc := range []struct{ key, want string }{{"a", "3"}, {"b", "2"}} {
		if got := h.Get(tc.key); string(got) != tc.want {
			t.Errorf("Get(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	if got := h.Get("c"); got != nil {
		t.Errorf("Get of a missing header = %q, want nil", got)
	}
	if got := Headers(nil).Get("a"); got != nil {
		t.Errorf("Get on no headers = %q", got)
	}
}

// TestHeadersRoundTrip: the headers a publish sends are the headers a
// reader receives, in order, a repeated name included, and can be sent
// again as they are.
func TestHeadersRoundTrip(t *testing.T) {
	in := Headers{{Key: "z", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "z", Value: []byte("3")}}
	var o publishOptions
	WithHeaders(in...)(&o)
	rec := wire.Record{Key: []byte("k"), Headers: o.headers, Payload: []byte("p")}
	var got wire.Record
	if !wire.NewRecordIter(wire.AppendRecord(nil, &rec)).Next(&got) {
		t.Fatal("no record decoded")
	}
	ev := eventOf(&wire.BatchView{Shard: 1}, 4, &got)
	if fmt.Sprintf("%s", ev.Headers) != fmt.Sprintf("%s", in) {
		t.Fatalf("received headers %s, want %s", ev.Headers, in)
	}
	var again publishOptions
	WithHeaders(ev.Headers...)(&again)
	if fmt.Sprintf("%s", again.headers) != fmt.Sprintf("%s", o.headers) {
		t.Fatalf("re-sent headers %s, want %s", again.headers, o.headers)
	}
	if eventOf(&wire.BatchView{}, 0, &wire.Record{}).Headers != nil {
		t.Fatal("a record without headers has non-nil Headers")
	}
}
