package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/handoff"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/pull"
	"github.com/airlock-dev/airlock/internal/results"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Source is the ce-source of the events the gate writes.
const Source = "airlock/gate"

// Config configures a Gate.
type Config struct {
	// Conn answers Airlock-Reply-To inboxes. Required.
	Conn *nats.Conn
	// JetStream reads requests and appends op events. Required.
	JetStream jetstream.JetStream
	// Policy decides each request. Required; SetPolicy replaces it.
	Policy *policy.Policy
	// PolicySource says where the policy came from (a file, "built-in"),
	// for the policy.loaded event.
	PolicySource string
	// Principals looks up the principal a resolution or control subject
	// names. Nil when the server authenticates nobody: the name on the
	// subject is then taken as given, and nothing stops anyone resolving.
	Principals func(name string) (Principal, bool)
	// Clock tells the time for hold expiries and control expiries; default
	// time.Now.
	Clock func() time.Time
	// Operands, when set, hashes the workspace files a request would touch
	// (nil map for a tool that touches none). The hashes go into the op's
	// summary, so a hold covers them and the executor runs nothing if one
	// changed by the time it claims the op. An error (args of the wrong
	// shape, a path that escapes the workspace) denies the op with its
	// code.
	Operands func(ctx context.Context, req *events.Request) (map[string]string, error)
	// Served, when set, says whether some executor group of the
	// deployment serves a tool in a workspace (streams.Served): a request
	// the policy allows for a tool and workspace no group serves is denied
	// with NO_EXECUTOR rather than left ready for ever. Nil: no check.
	Served func(ctx context.Context, ws, tool string) bool
	// Local, when set, says whether this process's executors serve a tool
	// in a workspace: the args of each admitted op that runs now (decided)
	// there are given to Handoff, for them (see internal/handoff).
	Local   func(ws, tool string) bool
	Handoff *handoff.Args
	// Starter, when set, starts in this process the ops that run now and
	// whose tool it serves (Local), where the executor allows it: their
	// first event is a started event carrying the decision, and the
	// request's delivery is held until the op has ended (ADR 0025). Nil:
	// every such op is decided, for the runners' consumers.
	Starter Starter
	// Results, when set, holds completed ops' sealed results: the answer
	// to a retry of a completed op carries its result while it is kept.
	Results *results.Store
	// Retention is what the policy keeps of a result in a workspace it
	// says nothing about; default events.DefaultResultTTL.
	Retention *events.Retention
	// Loops is how many batches are handled at once; default 4.
	Loops int
	// MaxBatch bounds the requests of one batch; default 256.
	MaxBatch int
	// AckWait is how long a request (or a grant to resume) may go
	// without a heartbeat before JetStream delivers it again: the claim
	// timeout of the ops this process starts; default 30s.
	AckWait time.Duration
	// Timeout bounds one step: a batch's appends, a resolution, a
	// control, a resume; default 15s.
	Timeout time.Duration
	// RetryDelay is the redelivery delay after a transient failure;
	// default 1s.
	RetryDelay time.Duration
	// HoldSweep is how often the gate forgets the requests it kept of
	// holds past their expiry; default DefaultHoldSweep.
	HoldSweep time.Duration
	// Archived, when set, tells retries of ops that left the ops stream
	// for the archive (ADR 0026; consumers/projector.Archived) from new
	// ops: the first event of such a retry is ended with the archived
	// outcome before anything acts on it. Nil when the ops stream keeps
	// every op.
	Archived Archived
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Archived tells retries of archived ops from new ops
// (consumers/projector.Archived).
type Archived interface {
	// CatchUp returns once the projection has folded what the ops floor,
	// as last read, says left: before a batch's first events are stored.
	CatchUp(ctx context.Context) error
	// Settle returns once Duplicate knows every op that left the ops
	// stream before after, the events asked about being at or below
	// upTo (0: not known).
	Settle(ctx context.Context, after time.Time, upTo uint64) error
	// SettleThrough returns once Duplicate knows every op with an event
	// below upTo, whenever its events left the ops stream.
	SettleThrough(ctx context.Context, after time.Time, upTo uint64) error
	// Duplicate is the archived op of which the event at seq is a retry;
	// nil when it is none.
	Duplicate(opID string, seq uint64) (*events.Op, error)
	// Restate ends the retry, whose newest event is at expect, with the
	// archived outcome of op, and returns it.
	// A lost compare-and-swap wraps oplog.ErrConflict.
	Restate(ctx context.Context, op *events.Op, expect uint64) (events.Type, any, error)
}

// Starter is this process's runner, as the gate starts ops through it
// (consumers/executor.Runner; ADR 0025).
type Starter interface {
	// Starts reports whether ops of tool may be started so at all.
	Starts(tool string) bool
	// OperandsUnchanged checks that a call's operands hash as the
	// decision recorded them; an error: decide the op instead.
	OperandsUnchanged(ctx context.Context, tool, ws string, args json.RawMessage, want map[string]string) error
	// Start reserves a place for op, of tool, and holds the op in hand
	// until release; false: decide it instead.
	Start(tool, op string) (release func(), ok bool)
	// StartClaim is the claim of an op's first attempt, made through
	// delivery n, to consumer, of the work item stored at workSeq (the
	// request, or a resumed op's granted event).
	StartClaim(tool, consumer string, workSeq, n uint64) *events.Claim
	// RunStarted runs the attempt of the stored started event, which
	// carries the decision and is stored at seq, and stores its outcome:
	// nil means the work item is acked.
	RunStarted(ctx context.Context, first *events.Started, seq uint64, args json.RawMessage, replyTo string) error
	// Recover settles a delivery, to consumer, of the work item of an op
	// started so, with the started event stored at firstSeq, and not
	// ended when the gate read it.
	Recover(ctx context.Context, m jetstream.Msg, consumer string, first *events.Started, firstSeq uint64, args json.RawMessage, replyTo string)
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.Loops <= 0 {
		c.Loops = 4
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 15 * time.Second
	}
	if c.HoldSweep <= 0 {
		c.HoldSweep = DefaultHoldSweep
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.PolicySource == "" {
		c.PolicySource = "built-in"
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	if c.Conn == nil || c.JetStream == nil || c.Policy == nil {
		return errors.New("gate: Conn, JetStream and Policy are required")
	}
	return nil
}

// Gate decides requests, resolves holds, resumes granted ops and applies
// operators' controls. Run it once; SetPolicy is safe to call while it
// runs.
type Gate struct {
	cfg    Config
	w      *oplog.Writer // its own, closed when Run returns
	ops    jetstream.Stream
	reqs   jetstream.Stream
	modes  *modes
	policy atomic.Pointer[policy.Policy]
	source atomic.Pointer[string]
	ready  chan struct{}
	// resumed is the grants this gate resumed when it appended them.
	resumed resumedSet
	// inHand is the work items (requests, ADR 0025; grants, ADR 0029) of
	// the ops this gate's process runs (Starter),
	// kept in progress until each op has ended; running counts those ops.
	inHand  pull.Held
	running sync.WaitGroup
	// holding is the requests of the ops this gate held, for the resume
	// of their grants (resume.go).
	holding *handoff.Store[heldRequest]
	// grants is the grants this gate appended of ops that the gate taking
	// their delivery starts itself (ADR 0029), for that delivery to take
	// when it comes here.
	grants *handoff.Store[*grant]
}

// New returns a gate.
func New(cfg Config) (*Gate, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w, err := oplog.NewWriter(cfg.JetStream)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	g := &Gate{cfg: cfg, w: w, modes: newModes(), ready: make(chan struct{}), holding: newHolding(), grants: newGrantsKept()}
	g.policy.Store(cfg.Policy)
	g.source.Store(&cfg.PolicySource)
	return g, nil
}

// Ready is closed once Run has loaded the controls in force, recorded the
// policy and subscribed to resolutions and controls.
func (g *Gate) Ready() <-chan struct{} { return g.ready }

// Policy is the policy the gate decides with.
func (g *Gate) Policy() *policy.Policy { return g.policy.Load() }

// Run handles requests, resolutions, controls and resumes until ctx ends.
func (g *Gate) Run(ctx context.Context) error {
	defer g.w.Close()
	js := g.cfg.JetStream
	var last uint64
	// On a cluster that is still settling, each step is tried again
	// until it answers.
	err := streams.Await(ctx, g.cfg.Logger, "the gate's streams, controls and policy", func(ctx context.Context) error {
		var err error
		if g.ops, err = js.Stream(ctx, streams.Ops); err != nil {
			return err
		}
		if g.reqs, err = js.Stream(ctx, streams.Requests); err != nil {
			return err
		}
		if last, err = g.loadModes(ctx); err != nil {
			return err
		}
		return g.recordPolicy(ctx, g.Policy(), *g.source.Load())
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	grp, gctx := errgroup.WithContext(ctx)
	grp.Go(func() error { return g.watchModes(gctx, last) })
	subscribed := make(chan struct{})
	grp.Go(func() error { return g.serveCommands(gctx, subscribed) })
	select {
	case <-subscribed:
		close(g.ready)
	case <-gctx.Done():
	}
	// What this process holds for the ops it runs (requests and grants,
	// inHand) is beaten from before either consumer delivers until every
	// such op has ended or stopped, after both consumers' handlers return.
	bctx, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBeats()
	go g.inHand.BeatEvery(bctx, g.cfg.AckWait/3)
	grp.Go(func() error {
		work, wctx := errgroup.WithContext(gctx)
		work.Go(func() error { return g.runResume(wctx) })
		work.Go(func() error { return g.runRequests(wctx) })
		err := work.Wait()
		g.running.Wait()
		return err
	})
	grp.Go(func() error { g.forgetExpiredHolds(gctx); return nil })
	return grp.Wait()
}

// maxResolving bounds the resolutions a gate settles at once.
const maxResolving = 64

// serveCommands answers resolutions and controls, as a queue group so
// that several gates share them. Resolutions are settled concurrently,
// at most maxResolving at once (each is its own op's compare-and-swap):
// approvers granting together do not wait in line for each other's
// reads and appends. Controls are settled one at a time, in order.
func (g *Gate) serveCommands(ctx context.Context, subscribed chan<- struct{}) error {
	var subs []*nats.Subscription
	var (
		resolving sync.WaitGroup
		mu        sync.Mutex
		stopped   bool // no resolution starts once set
	)
	slots := make(chan struct{}, maxResolving)
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
		mu.Lock()
		stopped = true
		mu.Unlock()
		resolving.Wait()
	}()
	resolve := func(ctx context.Context, m *nats.Msg) {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			<-slots
			return
		}
		resolving.Go(func() {
			defer func() { <-slots }()
			g.handleResolve(ctx, m)
		})
	}
	for subject, h := range map[string]func(context.Context, *nats.Msg){
		events.ResolveSubjects: resolve,
		events.ControlSubjects: g.handleControl,
	} {
		sub, err := g.cfg.Conn.QueueSubscribe(subject, streams.GateConsumer, func(m *nats.Msg) { h(ctx, m) })
		if err != nil {
			return fmt.Errorf("gate: subscribe %s: %w", subject, err)
		}
		subs = append(subs, sub)
	}
	if err := g.cfg.Conn.Flush(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("gate: subscribe: %w", err)
	}
	close(subscribed)
	<-ctx.Done()
	return nil
}

// runRequests decides requests until ctx ends.
func (g *Gate) runRequests(ctx context.Context) error {
	cons, err := g.consumer(ctx, streams.Requests, jetstream.ConsumerConfig{
		Durable:       streams.GateConsumer,
		Description:   "Airlock gate: requests to ops",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       g.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * g.cfg.Loops * g.cfg.MaxBatch,
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gate: consumer: %w", err)
	}
	// Requests in hand are beaten every third of this process's claim
	// timeout, so the ack wait must not drop below it.
	go streams.KeepAckWait(ctx, g.cfg.JetStream, streams.Requests, streams.GateConsumer, g.cfg.AckWait, g.cfg.AckWait/3, g.cfg.Logger)
	return pull.Batches(ctx, cons, pull.Config{Loops: g.cfg.Loops, Max: g.cfg.MaxBatch, Heartbeat: g.cfg.AckWait / 3}, g.handleBatch)
}

// consumer creates or updates one of the gate's durable consumers, trying
// again while the cluster settles.
func (g *Gate) consumer(ctx context.Context, stream string, cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return streams.AwaitConsumer(ctx, g.cfg.Logger, cc.Durable, func(ctx context.Context) (jetstream.Consumer, error) {
		cc := cc
		if err := streams.LongerAckWait(ctx, g.cfg.JetStream, stream, &cc, g.cfg.Logger); err != nil {
			return nil, err
		}
		return g.cfg.JetStream.CreateOrUpdateConsumer(ctx, stream, cc)
	})
}
