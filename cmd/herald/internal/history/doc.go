// Package history records what the clients of a fault test saw and checks it
// against the shards' logs read back at the end of the run.
//
// A fault test (kill -9 of a leader, a partition, a restart) runs clients
// against a cluster and records every publish and every read in one
// Recorder. A publish is an Invoke (or InvokeIf for a conditional publish)
// recorded just before the request is sent, then exactly one outcome
// recorded once the client knows it: Ack with the shard and offset the
// acknowledgement gave, Fail for a definite failure (the node said it did not
// and will not write the record), or Unknown when the outcome is in doubt (a
// timeout, a connection lost after the request went, an
// ErrOutcomeUnknown). A read (a Read page or the deliveries of a
// subscription) is recorded after it returned, with the shard, the first
// offset and the record ids at consecutive offsets from it. Every record
// carries a payload id unique to the run, which is how the checker tells
// records apart. The Recorder numbers events in the order they were
// recorded, so the history keeps real-time order: an event recorded before
// another one started really happened before it.
//
// After healing the cluster, the test reads every shard back into a Final
// (each shard's Log: its first offset and its entries) and calls Check,
// which returns every violation it finds, each naming its Rule:
//
//   - RuleAcked: every acknowledged publish is in the final log of the shard
//     its ack named, at the offset its ack gave.
//   - RuleDuplicate: a record is at most once in the final logs, across all
//     shards, whatever its outcome; a record acked at two places is one too.
//   - RuleForeign: every record in a final log was published, to that shard.
//   - RuleFailed: a publish that failed definitely is not in any final log.
//   - RuleRead: every record a read returned is the record at that offset in
//     the final log: reads are prefixes of one log, and no read showed a
//     record the final log lacks (an uncommitted or lost one).
//   - RulePhantom: no read returned a record before its publish was invoked.
//   - RuleConditional: a conditional publish won (was acked) at most once per
//     shard and expected tail, was acked at exactly its expected tail, and is
//     in the final log at nowhere else.
//   - RuleContiguous: each final log holds contiguous offsets from its first
//     offset.
//   - RuleHistory: the history itself is well formed (an outcome follows an
//     open Invoke of its id, attempts of one id name one shard); a test that
//     records wrongly is told so instead of being checked against nonsense.
//
// CompareReplicas adds RuleReplicas, for a test that reads the logs of
// several replicas of a shard: they must agree. Summarize counts what the
// history and the final logs hold (acked, failed, unknown, lost,
// duplicated...) for the fault test's notes.
//
// What is not a violation: a publish whose outcome is unknown (or that
// never got one recorded) being in the final log once, or not at all; an
// acknowledgement recorded after a read that already returned its record
// (the ack was on its way); a read that returned fewer records than the log
// had; and, when Log.First is above 0 because retention deleted the head of
// a shard, an ack or a read at an offset below First, which the checker
// cannot verify (Summary.Trimmed counts those acks). A test that runs
// without retention leaves First at 0, so a shard that lost its head is
// reported rather than excused.
//
// A record may be published again under the same id (a retry after an
// unknown outcome, which an idempotent producer must not duplicate): each
// attempt is an Invoke and its outcome, attempts of one id follow each
// other, and the record's outcome is acked if any attempt was acked, failed
// if every attempt failed definitely, and unknown otherwise.
//
// The package does no I/O and starts no goroutines; Recorder is safe for
// concurrent use, everything else is plain values.
package history
