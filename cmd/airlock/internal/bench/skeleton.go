package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/airlock-dev/airlock/internal/pull"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// The skeleton's streams, on a server of its own.
const (
	skeletonRequests = "BENCH_SK_REQUESTS"
	skeletonOps      = "BENCH_SK_OPS"
	skeletonResults  = "BENCH_SK_RESULTS"
	skeletonWS       = "skeleton"
)

// skeleton runs n ops through the pipeline's NATS skeleton on a fresh
// server with the pipeline's settings: the same streams (requests
// deduplicated by Nats-Msg-Id, ops, results with a TTL per message), the
// same messages with the same headers and the pipeline's mean size, the
// same deliveries and acknowledgements, and no Airlock work at all. A
// client publishes each request and waits for its acknowledgement and
// for a reply on its inbox, concurrency at a time; a worker takes the
// requests in batches as the gate does (pull.Batches, 4 batches of at
// most 256), appends a started event per op with the op's
// compare-and-set headers, acknowledges the requests, then stores a
// result and a completed event per op, each waiting for its
// acknowledgement, and replies; a reader takes every op event through an
// ordered consumer, as the projector does, and does nothing with it.
//
// Its CPU per op is what the design's messages cost on this machine
// before Airlock does anything: the least the pipeline's CPU per op can
// be without fewer messages or deliveries. It runs cfg.Warmup ops first,
// not timed, and returns the ops/s, the process's CPU per op in
// microseconds, and the messages stored per op.
func skeleton(ctx context.Context, cfg Config, res *Result, n int) (opsPerS, cpuPerOpUS, msgsPerOp float64, err error) {
	s, err := natsrv.Start(natsrv.Config{DataDir: filepath.Join(cfg.Dir, "skeleton"), SyncAlways: cfg.SyncAlways})
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	conns := make([]*nats.Conn, 3) // the client, the worker, the reader
	for i := range conns {
		if conns[i], err = nats.Connect("", nats.InProcessServer(s)); err != nil {
			return 0, 0, 0, err
		}
		defer conns[i].Close()
	}
	client, worker, reader := conns[0], conns[1], conns[2]
	cjs, err := jetstream.New(client, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, 0, 0, err
	}
	wjs, err := jetstream.New(worker, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, 0, 0, err
	}
	rjs, err := jetstream.New(reader)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, sc := range []jetstream.StreamConfig{streams.RequestsConfig(streams.Config{}), streams.OpsConfig(streams.Config{}), streams.ResultsConfig(streams.Config{})} {
		switch sc.Name {
		case streams.Requests:
			sc.Name, sc.Subjects = skeletonRequests, []string{"bench.sk.req.>"}
		case streams.Ops:
			sc.Name, sc.Subjects = skeletonOps, []string{"bench.sk.op.>"}
		case streams.Results:
			sc.Name, sc.Subjects = skeletonResults, []string{"bench.sk.res.>"}
		}
		if _, err := cjs.CreateStream(ctx, sc); err != nil {
			return 0, 0, 0, err
		}
	}
	body := make([]byte, max(res.RawMsgBytes-400, 64)) // about the mean message with its headers
	for i := range body {
		body[i] = 'x'
	}

	// The reader: every op event, through an ordered consumer.
	oc, err := rjs.OrderedConsumer(ctx, skeletonOps, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, 0, 0, err
	}
	var read atomic.Int64
	rctx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		it, err := oc.Messages()
		if err != nil {
			return
		}
		context.AfterFunc(rctx, it.Stop)
		for {
			if _, err := it.Next(); err != nil {
				return
			}
			read.Add(1)
		}
	}()
	defer func() { stopReader(); <-readerDone }()

	// The worker: requests in batches, as the gate and its runner.
	cons, err := wjs.CreateOrUpdateConsumer(ctx, skeletonRequests, jetstream.ConsumerConfig{
		Durable: "bench-sk-gate", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxAckPending: 4 * 4 * 256,
	})
	if err != nil {
		return 0, 0, 0, err
	}
	var failed atomic.Pointer[error]
	fail := func(err error) { failed.CompareAndSwap(nil, &err) }
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan struct{})
	go func() {
		defer close(workerDone)
		err := pull.Batches(wctx, cons, pull.Config{Loops: 4, Max: 256}, func(ctx context.Context, msgs []jetstream.Msg) {
			if err := skeletonBatch(ctx, wjs, worker, msgs, body); err != nil && ctx.Err() == nil {
				fail(err)
			}
		})
		if err != nil && wctx.Err() == nil {
			fail(err)
		}
	}()
	defer func() { stopWorker(); <-workerDone }()

	// The client: a request, its acknowledgement, its reply.
	inbox := nats.NewInbox()
	var mu sync.Mutex
	waiting := make(map[string]chan struct{}, res.Concurrency)
	sub, err := client.Subscribe(inbox+".*", func(m *nats.Msg) {
		mu.Lock()
		ch := waiting[m.Subject[len(inbox)+1:]]
		mu.Unlock()
		if ch != nil {
			close(ch)
		}
	})
	if err != nil {
		return 0, 0, 0, err
	}
	defer sub.Unsubscribe()
	reqBody, err := events.MarshalJSON(benchRequest("skeleton", 0))
	if err != nil {
		return 0, 0, 0, err
	}
	one := func(i int) error {
		if p := failed.Load(); p != nil {
			return *p
		}
		op := nuid.Next()
		ch := make(chan struct{})
		mu.Lock()
		waiting[op] = ch
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(waiting, op)
			mu.Unlock()
		}()
		msg := events.NewMessage("bench.sk.req."+skeletonWS+".bench", events.TypeRequested, "bench", op, op, reqBody)
		msg.Header.Set(events.HeaderReplyTo, inbox+"."+op)
		msg.Header[jetstream.MsgIDHeader] = []string{op}
		ack, err := cjs.PublishMsgAsync(msg)
		if err != nil {
			return err
		}
		select {
		case <-ack.Ok():
		case err := <-ack.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-ch:
			return nil
		case <-time.After(time.Minute):
			return fmt.Errorf("skeleton op %s: no reply in a minute", op)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// A warm-up as the pipeline's, not timed.
	if _, err := parallel(ctx, nil, cfg.Concurrency, cfg.Warmup, one); err != nil {
		return 0, 0, 0, err
	}
	cpu0, _ := processCPU()
	took, err := parallel(ctx, cfg.track(PhaseSkeleton, n), cfg.Concurrency, n, one)
	cpu1, _ := processCPU()
	if err != nil {
		return 0, 0, 0, err
	}
	if p := failed.Load(); p != nil {
		return 0, 0, 0, *p
	}
	// Every op's two events reached the reader, and each op stored its
	// four messages: the skeleton did what it stands for.
	all := cfg.Warmup + n
	for deadline := time.Now().Add(time.Minute); read.Load() < int64(2*all); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("the reader took %d of %d op events", read.Load(), 2*all)
		}
	}
	var msgs uint64
	for _, name := range []string{skeletonRequests, skeletonOps, skeletonResults} {
		st, err := cjs.Stream(ctx, name)
		if err != nil {
			return 0, 0, 0, err
		}
		msgs += st.CachedInfo().State.Msgs
	}
	return float64(n) / took.Seconds(), float64((cpu1 - cpu0).Microseconds()) / float64(n), float64(msgs) / float64(all), nil
}

// skeletonBatch is the gate's and the runner's messages for one batch of
// requests: a started event per op, appended together; the requests
// acknowledged; then for each op a result and a completed event, each
// acknowledged before the next, and a reply.
func skeletonBatch(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, msgs []jetstream.Msg, body []byte) error {
	type op struct {
		id, reply string
		seq       uint64
	}
	ops := make([]op, len(msgs))
	acks := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		id := m.Headers().Get("ce-subject")
		ops[i] = op{id: id, reply: m.Headers().Get(events.HeaderReplyTo)}
		e := events.NewMessage(skeletonOpSubject(id, "started"), events.TypeStarted, "bench", id, nuid.Next(), body)
		e.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{"0"}
		e.Header[jetstream.ExpectedLastSubjSeqSubjHeader] = []string{"bench.sk.op." + skeletonWS + "." + id + ".>"}
		var err error
		if acks[i], err = js.PublishMsgAsync(e); err != nil {
			return err
		}
	}
	for i, a := range acks {
		pa, err := awaitAck(ctx, a)
		if err != nil {
			return err
		}
		ops[i].seq = pa.Sequence
	}
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ops))
	for i, o := range ops {
		wg.Go(func() {
			// As results are kept (ADR 0027): the workspace's one
			// subject, the op and attempt in headers.
			r := events.NewMessage("bench.sk.res."+skeletonWS, events.TypeCompleted, "bench", o.id, nuid.Next(), body)
			r.Header[jetstream.MsgTTLHeader] = []string{(25 * time.Hour).String()}
			r.Header[events.HeaderResultOp] = []string{o.id}
			r.Header[events.HeaderResultAttempt] = []string{o.id}
			a, err := js.PublishMsgAsync(r)
			if err == nil {
				_, err = awaitAck(ctx, a)
			}
			if err != nil {
				errs[i] = err
				return
			}
			e := events.NewMessage(skeletonOpSubject(o.id, "completed"), events.TypeCompleted, "bench", o.id, nuid.Next(), body)
			e.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(o.seq, 10)}
			e.Header[jetstream.ExpectedLastSubjSeqSubjHeader] = []string{"bench.sk.op." + skeletonWS + "." + o.id + ".>"}
			if a, err = js.PublishMsgAsync(e); err == nil {
				_, err = awaitAck(ctx, a)
			}
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = nc.Publish(o.reply, []byte(`{"op_id":"`+o.id+`","state":"completed","result":{"text":"hello from the benchmark"}}`))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func skeletonOpSubject(id, verb string) string {
	return "bench.sk.op." + skeletonWS + "." + id + ".echo." + verb
}

func awaitAck(ctx context.Context, a jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case pa := <-a.Ok():
		return pa, nil
	case err := <-a.Err():
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
