package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/heraldmq/herald/client"
	"github.com/heraldmq/herald/supervisors"
)

// --replica on herald sub and herald read: nearest by default, leader when
// asked, anything else a usage error; not with --group.
func TestReplicaFlag(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want client.Replica
		err  string
	}{
		{[]string{"orders"}, client.ReplicaNearest, ""},
		{[]string{"orders", "--replica", "nearest"}, client.ReplicaNearest, ""},
		{[]string{"orders", "--replica", "leader"}, client.ReplicaLeader, ""},
		{[]string{"orders", "--replica", "follower"}, 0, `"follower": want nearest or leader`},
		{[]string{"orders", "--group", "g", "--replica", "leader"}, 0, "--replica does not go with --group"},
	} {
		var stderr bytes.Buffer
		cmd, err := parseSubCmd(tc.args, &stderr, noEnv)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error()+stderr.String(), tc.err) {
				t.Errorf("sub %v: %v %q, want %q", tc.args, err, stderr.String(), tc.err)
			}
		case err != nil:
			t.Errorf("sub %v: %v", tc.args, err)
		case cmd.conn.replica != tc.want:
			t.Errorf("sub %v: replica %v, want %v", tc.args, cmd.conn.replica, tc.want)
		}
	}
	var stderr bytes.Buffer
	cmd, err := parseReadCmd([]string{"orders", "--shard", "0", "--from", "0", "--replica", "leader"}, &stderr, noEnv)
	if err != nil || cmd.conn.replica != client.ReplicaLeader {
		t.Fatalf("read --replica leader: %+v, %v", cmd, err)
	}
}

// A replica's lag as stream describe and cluster status print it.
func TestReplicaLagText(t *testing.T) {
	r := client.ShardReplication{Leader: 2, LagDetail: true, Replicas: []client.ReplicaState{
		{Node: 2}, {Node: 1, Lag: 8, LagRecords: 24, LagBytes: 1536},
		{Node: 3, Lag: client.LagUnknown, LagRecords: client.LagUnknown, LagBytes: client.LagUnknown},
	}}
	var got []string
	for _, rs := range r.Replicas {
		got = append(got, replicaLagText(r, rs))
	}
	if strings.Join(got, "|") != "0|8 entries, 24 records, 1536 bytes|?" {
		t.Fatalf("describe: %q", got)
	}
	// From a node that gives entries only.
	old := client.ShardReplication{Replicas: []client.ReplicaState{{Node: 1, Lag: 8}}}
	if got := replicaLagText(old, old.Replicas[0]); got != "8" {
		t.Fatalf("without detail: %q", got)
	}
	js, err := json.Marshal(replicationJSONOf(client.StreamInfo{Tails: []uint64{40}, Replication: []client.ShardReplication{r}}))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"shard":0,"leader":2,"term":0,"commit":0,"tail":40,"replicas":[` +
		`{"node":2,"lag":0,"lag_records":0,"lag_bytes":0},` +
		`{"node":1,"lag":8,"lag_records":24,"lag_bytes":1536},` +
		`{"node":3,"lag":null,"lag_records":null,"lag_bytes":null}]}]`
	if string(js) != want {
		t.Fatalf("json:\n%s\nwant\n%s", js, want)
	}
	g := supervisors.GroupStatus{Lag: map[uint64]uint64{1: 8, 2: 0, 3: 0},
		LagRecords: map[uint64]uint64{1: 24, 2: 0, 3: 0}, LagBytes: map[uint64]uint64{1: 1536, 2: 0, 3: 0}}
	if got := groupLagText(g, 1) + " " + groupLagText(g, 2); got != "1:8/24r/1536B 2:0" {
		t.Fatalf("cluster status: %q", got)
	}
	if got := groupLagText(supervisors.GroupStatus{Lag: map[uint64]uint64{1: 3}}, 1); got != "1:3" {
		t.Fatalf("cluster status without records: %q", got)
	}
}
