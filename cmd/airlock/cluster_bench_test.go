package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// clusterBenchEnv runs BenchmarkCluster; make bench-cluster sets it.
const clusterBenchEnv = "AIRLOCK_BENCH_CLUSTER"

// Durations of BenchmarkCluster's phases.
const (
	benchPhase   = 20 * time.Second // each steady phase
	benchOutage  = 20 * time.Second // the ops leader down
	benchAfter   = 30 * time.Second // after it is back
	benchWorkers = 64               // ops in flight
)

// load submits echo ops from benchWorkers workers until stop, and counts
// completions per second since it started.
type load struct {
	start    time.Time
	mu       sync.Mutex
	perSec   []int
	failures atomic.Int64
	why      []string // the first failures, for the report
	inFlight sync.Map // op id -> time its submit began
}

func runLoad(b *testing.B, c *producers.Client, tag string, stop <-chan struct{}) *load {
	b.Helper()
	l := &load{start: time.Now()}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := next.Add(1)
				req := events.Request{Workspace: "bench", Agent: "agent", Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"run":%q,"i":%d}`, tag, i))}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				_, opID := req.Identity()
				l.inFlight.Store(opID, time.Now())
				out, err := c.Submit(ctx, req)
				for err == nil && !out.Terminal() && ctx.Err() == nil {
					out, err = c.Submit(ctx, req)
				}
				l.inFlight.Delete(opID)
				cancel()
				if err != nil || out.State != events.StateCompleted {
					l.failures.Add(1)
					l.mu.Lock()
					if len(l.why) < 5 {
						l.why = append(l.why, fmt.Sprintf("%s %s %s %v", out.State, out.Code, out.Message, err))
					}
					l.mu.Unlock()
					continue
				}
				l.done(time.Since(l.start))
			}
		}()
	}
	go func() {
		<-stop
		wg.Wait()
	}()
	return l
}

func (l *load) done(at time.Duration) {
	s := int(at / time.Second)
	l.mu.Lock()
	for len(l.perSec) <= s {
		l.perSec = append(l.perSec, 0)
	}
	l.perSec[s]++
	l.mu.Unlock()
}

// rate is the completions per second between from and to (seconds since
// the start).
func (l *load) rate(from, to int) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for s := from; s < to && s < len(l.perSec); s++ {
		n += l.perSec[s]
	}
	return float64(n) / float64(to-from)
}

// rawPublish is raw JetStream: async publishes of 512-byte messages into
// a stream of replicas on js for d, as msgs/s.
func rawPublish(b *testing.B, js jetstream.JetStream, replicas int, d time.Duration) float64 {
	b.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("BENCH_RAW_%d", time.Now().UnixNano())
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench.raw." + name}, Replicas: replicas})
	require.NoError(b, err)
	defer func() { _ = js.DeleteStream(ctx, name) }()
	body := []byte(strings.Repeat("x", 512))
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		for range 1000 {
			if _, err := js.PublishAsync("bench.raw."+name, body); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		n += 1000
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkCluster measures, on the machine it runs on and in one run:
// the pipeline with the embedded server (one node), on a three-node
// loopback cluster with one and with three Airlock processes, and with
// three while the ops stream's leader is down for 20 s and in the 30 s
// after it is back; each next to raw JetStream on the same servers. Echo
// ops, 64 in flight, each submitted and awaited by the Go client. Run it
// with make bench-cluster; the figures are in docs/performance.md.
func BenchmarkCluster(b *testing.B) {
	if os.Getenv(clusterBenchEnv) == "" {
		b.Skip(clusterBenchEnv + " unset: make bench-cluster runs it")
	}
	for range b.N {
		benchCluster(b)
	}
}

func benchCluster(b *testing.B) {
	results := map[string]float64{}
	report := func(name string, v float64) {
		results[name] = v
		b.ReportMetric(v, name)
	}
	steady := func(c *producers.Client, tag string) float64 {
		stop := make(chan struct{})
		l := runLoad(b, c, tag, stop)
		time.Sleep(benchPhase)
		close(stop)
		// The first 5 s warm up.
		return l.rate(5, int(benchPhase/time.Second))
	}

	// One node: airlock serve with its embedded server.
	{
		dir := b.TempDir()
		srv, err := launchServe(dir, nil, "--listen", freePort(b))
		require.NoError(b, err)
		c := benchClient(b, srv.url, dir)
		report("single_node_ops/s", steady(c, "single"))
		js := benchJetStream(b, srv.url, dir)
		report("single_node_raw_msgs/s", rawPublish(b, js, 1, 5*time.Second))
		srv.kill()
	}

	// The cluster: one process, then three.
	d := prepareDeployment(b, 3)
	d.start(0)
	c := d.agent(b, producers.WithWait(time.Minute))
	report("cluster_1_process_ops/s", steady(c, "one"))
	d.start(1)
	d.start(2)
	report("cluster_3_processes_ops/s", steady(c, "three"))
	js := d.cluster.jetStream(b, d.set)
	report("cluster_raw_msgs/s", rawPublish(b, js, 3, 5*time.Second))

	// A node loss: the ops stream's leader, down for 20 s.
	stop := make(chan struct{})
	l := runLoad(b, c, "loss", stop)
	time.Sleep(10 * time.Second)
	node := d.cluster.node(leader(js, streams.Ops))
	require.NotNil(b, node)
	node.kill()
	time.Sleep(benchOutage)
	node.start(b)
	time.Sleep(benchAfter)
	close(stop)
	before := l.rate(3, 10)
	during := l.rate(10, 10+int(benchOutage/time.Second))
	afterFrom := 10 + int(benchOutage/time.Second)
	after := l.rate(afterFrom, afterFrom+int(benchAfter/time.Second))
	afterFirst := l.rate(afterFrom, afterFrom+10)
	report("loss_before_ops/s", before)
	report("loss_during_ops/s", during)
	report("loss_after_ops/s", after)
	report("loss_after_first_10s_ops/s", afterFirst)
	report("loss_failed_ops", float64(l.failures.Load()))
	for _, w := range l.why {
		fmt.Fprintln(os.Stderr, "  a failed op:", w)
	}

	var names []string
	for k := range results {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "cluster bench (echo ops, 64 in flight, loopback, this machine):")
	for _, k := range names {
		fmt.Fprintf(os.Stderr, "  %-30s %10.0f\n", k, results[k])
	}
	fmt.Fprintf(os.Stderr, "  ratios: 3 processes / 1 = %.2f, cluster 1 process / single node = %.2f, during loss / before = %.2f, first 10 s after / before = %.2f\n",
		results["cluster_3_processes_ops/s"]/results["cluster_1_process_ops/s"],
		results["cluster_1_process_ops/s"]/results["single_node_ops/s"], during/before, afterFirst/before)
}

// benchClient is an agent client of the server at url with the creds of
// data dir dir.
func benchClient(b *testing.B, url, dir string) *producers.Client {
	b.Helper()
	opt, err := authority.ConnectOption(dir + "/" + authority.CredsDir + "/agent" + authority.CredsExt)
	require.NoError(b, err)
	nc, err := nats.Connect(url, opt, nats.MaxReconnects(-1))
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	c, err := producers.New(nc, producers.WithWait(time.Minute))
	require.NoError(b, err)
	return c
}

// benchJetStream is JetStream at url as Airlock's own principal.
func benchJetStream(b *testing.B, url, dir string) jetstream.JetStream {
	b.Helper()
	opt, err := authority.ConnectOption(dir + "/" + authority.CredsDir + "/" + authority.ServiceName + authority.CredsExt)
	require.NoError(b, err)
	nc, err := nats.Connect(url, opt)
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	return js
}
