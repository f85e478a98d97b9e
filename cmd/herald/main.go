// Command herald is Herald's single binary: `herald node` runs a broker and
// the other subcommands are clients of one.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `herald: a message broker

Usage:
  herald node    [--config F] [--data-dir D] [--listen ADDR] [--http ADDR] [--tls-cert F --tls-key F] [--trace none|stdout|otlp]
  herald stream  create|describe|list|delete STREAM [--shards N] [--routing hash|jump] [--ephemeral]
                 [--overflow drop_new|drop_old|block] [--retention-age D] [--retention-bytes N]
  herald pub     STREAM [MESSAGE...] [--key K] [--ack none|message|batch] [--batch N] [--count N --size B] [--if-offset N]
  herald sub     STREAM [--from earliest|latest|OFFSET] [--shard N] [--count N] [--queue N] [--json]
  herald sub     STREAM --group G [--member M] [--window N] [--max N] [--heartbeat DURATION] [--count N] [--json]
  herald read    STREAM --shard N --from OFFSET [--to OFFSET] [--limit N] [--json]
  herald group   poll|ack|nack|dead-letters|redrive|discard|describe STREAM --group G ...
                 (herald group --help lists each subcommand's flags)
  herald bench   isolation|publish|fanout|latency|groups|replay|idle|ceiling [flags]   (docs/benchmarks.md)
  herald token   new --name N --tenant T [--permissions P,...] [--namespaces NS,...]   (docs/security.md)

Client commands take --server ADDR (default 127.0.0.1:7400), --token T, --ca FILE, --insecure,
and for a node with mutual TLS --cert FILE --cert-key FILE.
A stream is tenant/namespace/stream; a bare name means default/default/name.
See docs/ for the protocol, configuration and operations.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "node":
		return runNode(args[1:], stderr)
	case "stream":
		return runStream(args[1:], stdin, stdout, stderr)
	case "pub":
		return runPub(args[1:], stdin, stdout, stderr)
	case "sub":
		return runSub(args[1:], stdin, stdout, stderr)
	case "read":
		return runRead(args[1:], stdin, stdout, stderr)
	case "group":
		return runGroup(args[1:], stdin, stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "token":
		return runToken(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "herald: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
