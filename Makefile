# Herald's Makefile mirrors CI: `make test` is what .ci/run runs.
GO        ?= go
BIN       := bin/herald
FUZZTIME  ?= 5m
BENCHTIME ?= 3s

.PHONY: all build run test chromium verify bench bench-go bench-compare bench-stages bench-report fuzz clean

all: build

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/herald

## run: start a node on the embedded defaults (data in ./data, QUIC 127.0.0.1:7400, HTTP 127.0.0.1:7401)
run: build
	./$(BIN) node

## test: every test with the race detector, including the fuzz targets' seed corpora (the dashboard's browser test needs chromium)
test: chromium
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 2 -timeout 14m ./...

## chromium: Debian's chromium package for the dashboard's browser test (cmd/herald TestDashboardInBrowser), installed
## when missing (as root, with apt-get); HERALD_CHROMIUM names another Chromium or Chrome binary instead
chromium:
	@if [ -n "$$HERALD_CHROMIUM" ] || command -v chromium >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
		echo "make: the dashboard's browser test needs Chromium: install Debian's chromium package as root (apt-get install chromium), or set HERALD_CHROMIUM"; \
		exit 1; \
	fi; \
	echo "== installing Debian's chromium for the dashboard's browser test"; \
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium

## verify: formatting, vet, a tidy go.mod and staticcheck (pinned in go.mod as a tool: go tool staticcheck)
verify:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	$(GO) tool staticcheck ./...

## bench: the report of docs/benchmarks.md: every herald bench scenario, NATS beside it, the plots (bench-report)
bench: bench-report

## bench-go: the Go benchmarks (publish, groups, tracing through a real node; storage commits)
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./storage/ ./supervisors/

## bench-stages: where a paced record's latency goes, stage by stage: a heraldstages build (net/stages) runs
## herald bench latency with the node in its process and prints the time between the stages of each record's path
bench-stages:
	$(GO) build -tags heraldstages -o bin/herald-stages ./cmd/herald
	./bin/herald-stages bench latency --in-process --fanouts 1,10

## bench-compare: the NATS side of the comparison (nats-server in a child process, plaintext and TLS 1.3; its own module in cmd/herald-compare)
COMPARE_FLAGS ?=
bench-compare:
	cd cmd/herald-compare && $(GO) run . $(COMPARE_FLAGS)

## bench-report: every `herald bench` scenario as JSON in bench/results/, each followed at once by its NATS peers
## (bench/results/nats.json), the plots in docs/img/, then issue 16's targets against that run (printed, and in
## bench/results/targets.json). Each comparison's two sides run within a minute of each other, so a slow spell of the
## machine falls on both. (Each scenario's node is a child herald node process, its CPU reported apart;
## BENCH_FLAGS=--in-process runs it in the bench's process.)
RESULTS        := bench/results
REPORT_BENCHES := publish fanout latency isolation groups replay idle ceiling
BENCH_FLAGS    ?=
COMPARE_BIN    := bin/herald-compare
bench-report: build
	mkdir -p $(RESULTS) docs/img
	cd cmd/herald-compare && $(GO) build -o $(CURDIR)/$(COMPARE_BIN) .
	rm -f $(RESULTS)/nats.json.tmp
	@for s in $(REPORT_BENCHES); do \
		echo "== herald bench $$s --json $(BENCH_FLAGS) > $(RESULTS)/$$s.json"; \
		./$(BIN) bench $$s --json $(BENCH_FLAGS) > $(RESULTS)/$$s.json.tmp && mv $(RESULTS)/$$s.json.tmp $(RESULTS)/$$s.json || exit 1; \
		case $$s in \
			publish) peers=js-publish,js-publish-tls,js-publish-sync,js-publish-sync-tls ;; \
			fanout)  peers=core-fanout,core-fanout-tls ;; \
			latency) peers=core-latency,core-latency-tls ;; \
			groups)  peers=js-consume,js-consume-tls ;; \
			*)       peers= ;; \
		esac; \
		if [ -n "$$peers" ]; then \
			echo "== herald-compare --scenarios $$peers --append $(RESULTS)/nats.json.tmp"; \
			./$(COMPARE_BIN) --scenarios $$peers --append $(RESULTS)/nats.json.tmp $(COMPARE_FLAGS) || exit 1; \
		fi; \
	done
	@# REPORT_BENCHES without a peered scenario runs no NATS side: the last nats.json stays.
	if [ -f $(RESULTS)/nats.json.tmp ]; then mv $(RESULTS)/nats.json.tmp $(RESULTS)/nats.json; fi
	./$(COMPARE_BIN) plot --in $(RESULTS) --out docs/img
	./$(COMPARE_BIN) report --in $(RESULTS) --json $(RESULTS)/targets.json

## fuzz: run every fuzz target of every package for FUZZTIME each (make fuzz FUZZTIME=30s); FUZZFLAGS adds go test flags (-parallel 1)
FUZZFLAGS ?=
fuzz:
	@pkgs=$$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...) || exit 1; \
	for pkg in $$pkgs; do \
		list=$$($(GO) test -list '^Fuzz' $$pkg) || { echo "$$list"; exit 1; }; \
		for target in $$(echo "$$list" | grep '^Fuzz'); do \
			echo "== $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg || exit 1; \
		done; \
	done

clean:
	rm -rf bin
