package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heraldmq/herald/client"
)

// BenchmarkDashboardAtScale measures what the dashboard costs a node with
// 1,000 streams and 10,000 subscriptions under a steady publish load: the
// node's CPU (its process's utime+stime) in phases with no dashboard open
// and with headless Chromium showing a view, alternated; how long the
// API's heaviest answers take and how big they are; and whether the page
// ever blocked its main thread (long tasks over 50 ms) or grew its heap.
// It is a measured run, not a test: run it alone on an idle machine,
//
//	go test -run '^$' -bench BenchmarkDashboardAtScale -benchtime 1x -timeout 20m ./cmd/herald/
//
// DASHBOARD_BENCH_PHASE (a duration, default 20s) sets each phase's length;
// the node's CPU profile of the streams-view phase is written to
// $TMPDIR/herald-dashboard-cpu.pprof.
func BenchmarkDashboardAtScale(b *testing.B) {
	const (
		streams      = 1000
		subsTotal    = 10_000
		hotSubs      = 1009 // on stream 0: a shard page of a thousand subscribers
		perClient    = 500
		groups       = 100
		batchRecords = 10
		payloadBytes = 100
		publishers   = 4
		// each publisher sends a batch every publishEvery: 500 batches,
		// 5,000 records and ~50,000 deliveries a second in all.
		publishEvery = 8 * time.Millisecond
	)
	phase := 20 * time.Second
	if v := os.Getenv("DASHBOARD_BENCH_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		phase = d
	}
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		node := startNode(b, b.TempDir(), "HERALD_PPROF=true", "HERALD_MAX_SUBSCRIPTIONS_PER_CONNECTION=1000")
		ctl := node.dial(b)
		names := make([]client.StreamName, streams)
		for i := range names {
			names[i] = client.StreamName{Tenant: "default", Namespace: "scale", Stream: fmt.Sprintf("s%04d", i)}
			if _, err := ctl.CreateStream(ctx, names[i], client.StreamConfig{Shards: 1, Durable: true}); err != nil {
				b.Fatal(err)
			}
		}
		// 10,000 subscriptions over 20 connections, each read by a
		// goroutine: 1,009 on stream 0, 9 on each other stream.
		targets := make([]int, 0, subsTotal)
		for range hotSubs {
			targets = append(targets, 0)
		}
		for i := 1; i < streams; i++ {
			for range (subsTotal - hotSubs) / (streams - 1) {
				targets = append(targets, i)
			}
		}
		readCtx, stopReading := context.WithCancel(ctx)
		var readers sync.WaitGroup
		var delivered atomic.Int64
		start := time.Now()
		for k := 0; k < len(targets); k += perClient {
			c := node.dial(b)
			var wg sync.WaitGroup
			errs := make(chan error, perClient)
			for _, s := range targets[k:min(k+perClient, len(targets))] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sub, err := c.Subscribe(ctx, names[s], client.WithStartLatest())
					if err != nil {
						errs <- err
						return
					}
					readers.Add(1)
					go func() {
						defer readers.Done()
						defer sub.Close()
						for {
							if _, err := sub.Next(readCtx); err != nil {
								return
							}
							delivered.Add(1)
						}
					}()
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatalf("subscribe: %v", err)
			}
		}
		b.Logf("%d streams, %d subscriptions in %.1f s", streams, len(targets), time.Since(start).Seconds())
		for i := range groups {
			if _, err := ctl.Group(names[i], "g").Poll(ctx, 0, 1, 0); err != nil {
				b.Fatal(err)
			}
		}

		pubCtx, stopPublishing := context.WithCancel(ctx)
		var pubs sync.WaitGroup
		var published atomic.Int64
		for p := range publishers {
			pubs.Add(1)
			go func() {
				defer pubs.Done()
				rng := rand.New(rand.NewPCG(uint64(p), 1))
				payload := make([]byte, payloadBytes)
				batch := make([][]byte, batchRecords)
				for i := range batch {
					batch[i] = payload
				}
				tick := time.NewTicker(publishEvery)
				defer tick.Stop()
				for {
					select {
					case <-pubCtx.Done():
						return
					case <-tick.C:
					}
					if _, err := ctl.PublishBatch(pubCtx, names[rng.IntN(streams)], batch); err == nil {
						published.Add(batchRecords)
					}
				}
			}()
		}
		time.Sleep(phase / 2) // warm up: every queue and window past its first fill

		log := &pageLog{}
		tab := browser(b, ctx, log)
		base := "http://" + node.http + "/"
		views := []struct{ name, url, ready string }{
			{"streams view (sorted by publish rate)", base + "#/streams?sort=publish_rate&order=desc", `#streams tbody tr`},
			{"shard view (1,009 subscriptions, fullest first)", base + "#/stream/default/scale/s0000/shard/0", `#subscriptions tbody tr`},
			{"overview", base + "#/", `#charts canvas`},
		}
		type result struct {
			name             string
			cpu              float64 // node CPU, % of one core
			published, deliv int64
			longTasks        int
			longestTask      float64
			heapMB           float64
		}
		var results []result
		measure := func(name string, during func()) result {
			cpu0 := processCPUSeconds(b, node.cmd.Process.Pid)
			pub0, del0, t0 := published.Load(), delivered.Load(), time.Now()
			during()
			cpu1 := processCPUSeconds(b, node.cmd.Process.Pid)
			secs := time.Since(t0).Seconds()
			return result{name: name, cpu: 100 * (cpu1 - cpu0) / secs, published: int64(float64(published.Load()-pub0) / secs),
				deliv: int64(float64(delivered.Load()-del0) / secs)}
		}
		blank := func() {
			if err := chromedp.Do(tab, chromedp.Navigate("about:blank")); err != nil {
				b.Fatal(err)
			}
		}
		// Each view twice, each after a phase with no dashboard: the load
		// drifts (and other processes share the machine), so a view is
		// compared with the phase just before it.
		for round := range 2 {
			for vi, v := range views {
				vi += round * len(views)
				blank()
				results = append(results, measure("no dashboard", func() { time.Sleep(phase) }))
				show(b, tab, log, v.url, v.ready)
				if _, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`window.__lt = []; new PerformanceObserver((l) => {
				for (const e of l.getEntries()) window.__lt.push(e.duration); }).observe({type: "longtask", buffered: true});`)); err != nil {
					b.Fatal(err)
				}
				profiled := make(chan string, 1)
				if vi == 0 {
					go func() { profiled <- fetchProfile(node.http, phase*3/4) }()
				}
				r := measure(v.name, func() { time.Sleep(phase) })
				if vi == 0 {
					b.Logf("node CPU profile of the streams view: %s", <-profiled)
				}
				tasks, err := chromedp.Run(tab, chromedp.Evaluate[[]float64](`window.__lt`))
				if err != nil {
					b.Fatal(err)
				}
				r.longTasks = len(tasks)
				if len(tasks) > 0 {
					r.longestTask = slices.Max(tasks)
				}
				heap, err := chromedp.Run(tab, chromedp.Evaluate[float64](`performance.memory ? performance.memory.usedJSHeapSize : 0`))
				if err != nil {
					b.Fatal(err)
				}
				r.heapMB = heap / (1 << 20)
				results = append(results, r)
			}
		}
		blank()

		// The API's heaviest answers, asked directly.
		for _, path := range []string{
			"/api/v1/node?series=1",
			"/api/v1/streams?sort=publish_rate&order=desc&limit=50",
			"/api/v1/streams?sort=name&limit=500",
			"/api/v1/streams/default/scale/s0000",
			"/api/v1/streams/default/scale/s0000/shards/0/subscriptions?limit=50",
			"/api/v1/streams/default/scale/s0000/shards/0/subscriptions?limit=200",
			"/api/v1/groups?sort=lag&order=desc&limit=50",
		} {
			var took []time.Duration
			size := 0
			for range 20 {
				t0 := time.Now()
				resp, err := http.Get("http://" + node.http + path)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				took = append(took, time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
				}
				size = len(body)
			}
			slices.Sort(took)
			fmt.Printf("GET %-70s %7d bytes  p50 %6.2f ms  max %6.2f ms\n", path, size, ms(took[len(took)/2]), ms(took[len(took)-1]))
		}
		stopPublishing()
		pubs.Wait()
		stopReading()
		readers.Wait()
		var node0 map[string]any
		resp, err := http.Get("http://" + node.http + "/api/v1/node")
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&node0)
			resp.Body.Close()
		}
		if n, ok := node0["node"].(map[string]any); ok {
			fmt.Printf("node at the end: %v subscriptions, %v connections, rss %.0f MiB\n", n["subscriptions"], n["connections"], n["rss_bytes"].(float64)/(1<<20))
		}
		var off []float64
		for _, r := range results {
			fmt.Printf("%-50s node CPU %5.1f%%  %6d records/s published  %7d delivered/s  long tasks %d (longest %.0f ms)  JS heap %.1f MiB\n",
				r.name, r.cpu, r.published, r.deliv, r.longTasks, r.longestTask, r.heapMB)
			if r.name == "no dashboard" {
				off = append(off, r.cpu)
			}
		}
		offMean := 0.0
		for _, v := range off {
			offMean += v
		}
		offMean /= float64(len(off))
		b.ReportMetric(offMean, "node-cpu-%-no-dashboard")
		added := map[string][]float64{}
		for i, r := range results {
			if r.name != "no dashboard" {
				added[r.name] = append(added[r.name], r.cpu-results[i-1].cpu)
			}
		}
		for vi, v := range views {
			sum := 0.0
			for _, a := range added[v.name] {
				sum += a
			}
			fmt.Printf("%-50s adds %+.1f points of one core (each round: %.1f)\n", v.name, sum/float64(len(added[v.name])), added[v.name])
			b.ReportMetric(sum/float64(len(added[v.name])), fmt.Sprintf("node-cpu-%%-added-view%d", vi+1))
		}
		if msgs := log.String(); len(log.errs) > 0 {
			b.Fatalf("the page reported errors: %s", msgs)
		}
		cancel()
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// processCPUSeconds returns process pid's user+system CPU time, from
// /proc/PID/stat (utime and stime, fields 14 and 15, in 1/100 s).
func processCPUSeconds(tb testing.TB, pid int) float64 {
	tb.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return (utime + stime) / 100
}

// fetchProfile takes the node's CPU profile for d and returns where it
// was written (or why not).
func fetchProfile(httpAddr string, d time.Duration) string {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, int(d.Seconds())))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	path := filepath.Join(os.TempDir(), "herald-dashboard-cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		return err.Error()
	}
	return path
}
