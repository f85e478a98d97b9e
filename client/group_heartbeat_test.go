package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heraldmq/herald/net/wire"
)

func TestHeartbeatPlan(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const every = 10 * time.Second
	tests := []struct {
		name     string
		now      time.Time
		lastSent time.Time
		send     bool
		next     time.Time
	}{
		{"just sent", t0, t0, false, t0.Add(every)},
		{"before due", t0.Add(9 * time.Second), t0, false, t0.Add(every)},
		{"due", t0.Add(every), t0, true, t0.Add(2 * every)},
		{"late", t0.Add(25 * time.Second), t0, true, t0.Add(35 * time.Second)},
		{"an ack put it off", t0.Add(every), t0.Add(5 * time.Second), false, t0.Add(15 * time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			send, next := heartbeatPlan(tc.now, tc.lastSent, every)
			if send != tc.send || !next.Equal(tc.next) {
				t.Fatalf("heartbeatPlan = %v, +%v; want %v, +%v", send, next.Sub(t0), tc.send, tc.next.Sub(t0))
			}
		})
	}
}

func TestHeartbeatInterval(t *testing.T) {
	tests := []struct {
		asked   time.Duration
		session uint32
		want    time.Duration
	}{
		{5 * time.Second, 30000, 5 * time.Second},
		{5 * time.Second, 0, 5 * time.Second},
		{0, 30000, 10 * time.Second},
		{0, 2, time.Millisecond},
		{0, 0, 0},
		{-1, 30000, 0},
	}
	for _, tc := range tests {
		if got := heartbeatInterval(tc.asked, tc.session); got != tc.want {
			t.Errorf("heartbeatInterval(%v, %d) = %v, want %v", tc.asked, tc.session, got, tc.want)
		}
	}
}

// TestDecodeGroupFrame: what a group stream may carry, and the protocol
// violations.
func TestDecodeGroupFrame(t *testing.T) {
	frame := func(b []byte) wire.Frame {
		h, err := wire.DecodeHeader(b, wire.DefaultMaxFrameBytes)
		if err != nil {
			t.Fatal(err)
		}
		return wire.Frame{Header: h, Body: b[wire.HeaderSize:]}
	}
	push := wire.GroupRecords{Cursor: []byte("c"), Records: []wire.GroupRecord{groupRec(1, 4, 2)}}
	tests := []struct {
		name  string
		frame []byte
		want  string // the message's type, or "violation"
	}{
		{"assignment", wire.AppendGroupAssignment(nil, 7, assigned(1, 0, 0)), "*client.groupAnswerReceived"},
		{"assignment without id", wire.AppendGroupAssignment(nil, 0, assigned(1, 0, 0)), "violation"},
		{"push", wire.AppendGroupRecords(nil, 0, push), "*client.groupPushReceived"},
		{"push with an id", wire.AppendGroupRecords(nil, 3, push), "violation"},
		{"push without a cursor", wire.AppendGroupRecords(nil, 0, wire.GroupRecords{Records: push.Records}), "violation"},
		{"error answering a request", wire.AppendError(nil, 9, wire.Errorf(wire.CodeStaleCursor, "x")), "*client.groupErrorReceived"},
		{"error ending the stream", wire.AppendError(nil, 0, wire.Errorf(wire.CodeSessionExpired, "x")), "*client.groupStreamEnded"},
		{"another frame", wire.AppendOK(nil, 4), "violation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodeGroupFrame(frame(tc.frame))
			if tc.want == "violation" {
				if !errors.Is(err, ErrProtocolViolation) {
					t.Fatalf("decoded %T, %v; want ErrProtocolViolation", m, err)
				}
				return
			}
			if err != nil || fmt.Sprintf("%T", m) != tc.want {
				t.Fatalf("decoded %T, %v; want %s", m, err, tc.want)
			}
		})
	}
	m, _ := decodeGroupFrame(frame(wire.AppendGroupRecords(nil, 0, push)))
	d := m.(*groupPushReceived).delivery
	if string(d.Cursor) != "c" || len(d.Records) != 1 {
		t.Fatalf("delivery = %+v", d)
	}
	checkGroupRecord(t, d.Records[0], 1, 4, 2)
	m, _ = decodeGroupFrame(frame(wire.AppendError(nil, 0, wire.Errorf(wire.CodeSessionExpired, "x"))))
	if e := m.(*groupStreamEnded); !e.fromNode || !errors.Is(e.err, ErrSessionExpired) {
		t.Fatalf("ended = %+v", e)
	}
}
