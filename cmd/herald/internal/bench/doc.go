// Package bench is `herald bench`: the benchmark scenarios of
// docs/benchmarks.md and the scaffold they share.
//
// A scenario is a page: its flags (newScenarioFlags adds --json and
// --in-process), a session (Env.open starts the node and the progress
// line), its measured cells (a meter around each reads the node's CPU and
// this process's; a pipeline publishes with bounded acks in flight;
// awaitCount waits for subscribers to catch up) and its report
// (session.report prints the JSON or the text tables). Every scenario
// checks that nothing it published was lost or duplicated where the
// stream's guarantees say so.
//
// By default the node is a child `herald node` process on a temporary data
// dir (processNode), so that its CPU per million records is measured apart
// from the clients' however the two shared the machine's cores;
// --in-process starts it in this process (inProcessNode), as isolation
// always does to measure the live heap, and ceiling does by default to set
// Herald's publish beside the raw Badger ceiling measured in this process.
//
// The herald command wires Run to `herald bench SCENARIO` (cmd_bench.go);
// the JSON field names are read by cmd/herald-compare's plots: add fields,
// never rename them.
package bench
