package bench

import "testing"

// The ceiling scenario measures Badger, raw QUIC and Herald's durable
// publish of the same shape briefly and reports sane figures.
func TestBenchCeilingRuns(t *testing.T) {
	var res ceilingResult
	runJSONNode(t, false, &res, "ceiling", "--duration", "200ms", "--group-commit", "16")
	if res.Scenario != "ceiling" {
		t.Fatalf("unexpected result: %+v", res)
	}
	b := res.Badger
	if b.BatchesPerCommit != 16 || b.BatchRecords != 64 || b.PayloadBytes != 128 || b.Commits <= 0 || b.RecordsPerSec <= 0 || b.MBPerSec <= 0 {
		t.Errorf("badger: %+v", b)
	}
	checkLatency(t, "badger commit", b.CommitLatency)
	q := res.QUIC
	if q.BulkBytes <= 0 || q.BulkMBPerSec <= 0 || q.Frames <= 0 || q.FramesPerSec <= 0 || q.FrameBytes != 128 {
		t.Errorf("quic: %+v", q)
	}
	checkLatency(t, "quic echo", q.EchoRTT)
	p := res.HeraldPublish
	if p == nil || !p.Durable || p.BatchRecords != 64 || p.PayloadBytes != 128 || p.RecordsPerSec <= 0 {
		t.Fatalf("herald publish: %+v", p)
	}
	checkCPU(t, "herald publish", p.CPU, p.Records, false)
	if res.HeraldFractionOfBadger <= 0 {
		t.Errorf("fraction %v", res.HeraldFractionOfBadger)
	}
}
