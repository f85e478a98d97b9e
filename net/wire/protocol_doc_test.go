package wire_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// These tests keep docs/protocol.md in step with the code: the error code
// table, the frame type table, the body layout headings, the feature bits,
// the keyed routing examples and the worked hex examples are read back from
// the page and compared with what the package defines.

const protocolDoc = "../../docs/protocol.md"

// docSection returns the lines of the "## title" section of the protocol doc.
func docSection(t *testing.T, title string) []string {
	t.Helper()
	raw, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatalf("reading the protocol reference: %v", err)
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == title
			continue
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no section %q", protocolDoc, title)
	}
	return out
}

// tableRows returns the cells of the markdown table rows in lines whose first
// cell satisfies first.
func tableRows(lines []string, first func(string) bool) [][]string {
	var rows [][]string
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		if first(cells[0]) {
			rows = append(rows, cells)
		}
	}
	return rows
}

func isNumber(s string) bool { _, err := strconv.ParseUint(s, 0, 16); return err == nil }

// retryNames are the retry class names the doc uses.
var retryNames = map[wire.RetryClass]string{
	wire.RetryFatal:          "fatal",
	wire.RetryNow:            "retry_now",
	wire.RetryAfter:          "retry_after",
	wire.RetryOutcomeUnknown: "outcome_unknown",
}

func TestProtocolDocErrorTable(t *testing.T) {
	rows := tableRows(docSection(t, "Error codes"), isNumber)
	documented := map[wire.Code]bool{}
	for _, row := range rows {
		if len(row) < 3 {
			t.Errorf("error table row %q has fewer than 3 cells", row)
			continue
		}
		n, _ := strconv.ParseUint(row[0], 10, 16)
		c := wire.Code(n)
		if documented[c] {
			t.Errorf("code %d is documented twice", n)
		}
		documented[c] = true
		if row[1] != c.String() {
			t.Errorf("code %d: documented name %q, code says %q", n, row[1], c.String())
		}
		if want := retryNames[c.Retry()]; row[2] != want {
			t.Errorf("code %d (%s): documented retry class %q, code says %q", n, c, row[2], want)
		}
	}
	for _, c := range wire.Codes() {
		if !documented[c] {
			t.Errorf("code %d (%s) is missing from the error table in %s", c, c, protocolDoc)
		}
	}
	if len(documented) != len(wire.Codes()) {
		t.Errorf("the doc lists %d codes, Codes() has %d", len(documented), len(wire.Codes()))
	}
	// The retry classes themselves are explained.
	classes := tableRows(docSection(t, "Error codes"), func(s string) bool {
		for _, name := range retryNames {
			if s == name {
				return true
			}
		}
		return false
	})
	if len(classes) != len(retryNames) {
		t.Errorf("the doc explains %d retry classes, want %d", len(classes), len(retryNames))
	}
}

func TestProtocolDocFrameTypes(t *testing.T) {
	rows := tableRows(docSection(t, "Frame types"), func(s string) bool { return strings.HasPrefix(s, "0x") && isNumber(s) })
	seen := map[wire.Type]bool{}
	for _, row := range rows {
		n, _ := strconv.ParseUint(row[0], 0, 8)
		typ := wire.Type(n)
		seen[typ] = true
		if name, ok := knownTypes[typ]; !ok || row[1] != name {
			t.Errorf("doc lists type %s as %q; the code has %q", row[0], row[1], typ.String())
		}
	}
	for typ, name := range knownTypes {
		if !seen[typ] {
			t.Errorf("type 0x%02x %s is missing from the frame type table", uint8(typ), name)
		}
	}
}

func TestProtocolDocFrameBodies(t *testing.T) {
	// Every type has a "### Name (0xNN)" heading (two types may share one)
	// in the Frame bodies section.
	var headings []string
	for _, line := range docSection(t, "Frame bodies") {
		if strings.HasPrefix(line, "### ") {
			headings = append(headings, strings.ToLower(line))
		}
	}
	for typ, name := range knownTypes {
		code := fmt.Sprintf("(0x%02x)", uint8(typ))
		found := false
		for _, h := range headings {
			found = found || strings.Contains(h, code)
		}
		if !found {
			t.Errorf("type %s %s has no body layout heading in %s", code, name, protocolDoc)
		}
	}
}

func TestProtocolDocFeatureBits(t *testing.T) {
	rows := tableRows(docSection(t, "Feature bits and version"), isNumber)
	var all uint64
	for _, row := range rows {
		bit, _ := strconv.ParseUint(row[0], 10, 8)
		val, err := strconv.ParseUint(row[1], 0, 64)
		if err != nil || val != 1<<bit {
			t.Errorf("feature row %q: value %q is not bit %d", row, row[1], bit)
		}
		all |= val
	}
	if all != wire.Features {
		t.Errorf("documented feature bits %#x, wire.Features %#x", all, wire.Features)
	}
}

// docExample returns the bytes of the ```text block that follows the
// "<!-- marker" comment in the doc: on each line, the hex before '#'.
func docExample(t *testing.T, marker string) []byte {
	t.Helper()
	lines := docSection(t, "Worked example: a Publish frame")
	start := -1
	for i, line := range lines {
		if strings.HasPrefix(line, "<!-- "+marker) {
			start = i
			break
		}
	}
	if start < 0 || start+1 >= len(lines) || lines[start+1] != "```text" {
		t.Fatalf("no ```text block after the %q marker", marker)
	}
	var out []byte
	for _, line := range lines[start+2:] {
		if line == "```" {
			return out
		}
		code, _, _ := strings.Cut(line, "#")
		b, err := hex.DecodeString(strings.Join(strings.Fields(code), ""))
		if err != nil {
			t.Fatalf("example line %q: %v", line, err)
		}
		out = append(out, b...)
	}
	t.Fatalf("the %q block is not closed", marker)
	return nil
}

func TestProtocolDocExamples(t *testing.T) {
	recs := wire.AppendRecords(nil, []wire.Record{{Key: []byte("u1"), Headers: []wire.RecordHeader{{Key: "h", Value: []byte("v")}}, Payload: []byte("hi")}})
	publish := wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: wire.AnyShard, Key: []byte("u1"), Count: 1, Records: recs}
	idempotent := wire.Publish{Name: nameABC, Ack: wire.AckPerBatch, Shard: 3, Key: []byte("u1"), Idempotent: true, ProducerID: 42, Sequence: 2, Count: 1, Records: recs}
	tests := []struct {
		marker string
		want   []byte
	}{
		{"publish-example", wire.AppendPublish(nil, 7, publish)},
		{"publish-ack-example", wire.AppendPublishAck(nil, 7, wire.PublishAck{Shard: 3, Offset: 41, Count: 1})},
		{"publish-idempotent-example", wire.AppendPublish(nil, 8, idempotent)},
		{"publish-ack-duplicate-example", wire.AppendPublishAck(nil, 8, wire.PublishAck{Shard: 3, Offset: 42, Count: 1, Duplicate: true})},
	}
	for _, tc := range tests {
		t.Run(tc.marker, func(t *testing.T) {
			if got := docExample(t, tc.marker); !bytes.Equal(got, tc.want) {
				t.Fatalf("the doc shows\n%x\nthe encoder writes\n%x", got, tc.want)
			}
		})
	}
	// The examples decode back to what the text says they are.
	for marker, want := range map[string]wire.Publish{"publish-example": publish, "publish-idempotent-example": idempotent} {
		f := splitFrame(t, docExample(t, marker))
		p, err := wire.DecodePublish(f.Body)
		if err != nil || !sameValue(p, want) {
			t.Fatalf("%s decodes to %+v, %v", marker, p, err)
		}
		if _, err := wire.ValidateRecords(p.Records, p.Count); err != nil {
			t.Fatal(err)
		}
	}
	// The text says u1 routes to shard 3 of 8 with hash routing.
	if got := wire.ShardFor([]byte("u1"), 8, wire.RoutingHash); got != 3 {
		t.Fatalf("u1 routes to shard %d of 8, the example says 3", got)
	}
}

func TestProtocolDocRoutingExamples(t *testing.T) {
	rows := tableRows(docSection(t, "Keyed routing"), func(s string) bool { return strings.HasPrefix(s, `"`) })
	if len(rows) < 4 {
		t.Fatalf("found %d routing examples", len(rows))
	}
	for _, row := range rows {
		if len(row) != 5 {
			t.Fatalf("routing example %q: want 5 cells", row)
		}
		key, err := strconv.Unquote(row[0])
		if err != nil {
			t.Fatalf("routing example key %s: %v", row[0], err)
		}
		hash, err1 := strconv.ParseUint(row[1], 0, 64)
		shards, err2 := strconv.ParseUint(row[2], 10, 32)
		byHash, err3 := strconv.ParseUint(row[3], 10, 32)
		byJump, err4 := strconv.ParseUint(row[4], 10, 32)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			t.Fatalf("routing example %q does not parse", row)
		}
		if got := wire.KeyHash([]byte(key)); got != hash {
			t.Errorf("FNV-1a-64(%q) = %#x, the doc says %#x", key, got, hash)
		}
		if got := wire.ShardFor([]byte(key), uint32(shards), wire.RoutingHash); uint64(got) != byHash {
			t.Errorf("hash routing of %q over %d shards = %d, the doc says %d", key, shards, got, byHash)
		}
		if got := wire.ShardFor([]byte(key), uint32(shards), wire.RoutingJump); uint64(got) != byJump {
			t.Errorf("jump routing of %q over %d shards = %d, the doc says %d", key, shards, got, byJump)
		}
	}
}
