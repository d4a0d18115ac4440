package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Config configures a Runner.
type Config struct {
	// JetStream reads decided events and appends op events. Required.
	JetStream jetstream.JetStream
	// Registry holds the executors to run. Required.
	Registry *Registry
	// Workers bounds the calls of one batch that run at once, and the
	// batch size; default 64.
	Workers int
	// Loops is how many batches of one tool are in hand at once; a slow
	// call holds up only its own batch. Default 4.
	Loops int
	// Direct bounds the ops the gate of this process starts and runs
	// itself at once (ADR 0025); past it ops are decided and taken by a
	// runner's consumer. Default 2 × Loops × Workers (512): the bench's
	// 512 submits in flight all take the shorter path.
	Direct int
	// ClaimTimeout is how long a claimed op may go without a heartbeat
	// before its decided event is redelivered and recovery decides; default
	// 30s. Runners heartbeat every third of it while a call runs.
	ClaimTimeout time.Duration
	// RecordFor is how long the runner keeps trying to store an outcome
	// (a NATS node lost, a leader being elected) before it leaves the op
	// to recovery; default 2 × ClaimTimeout. It keeps heartbeating the
	// delivery meanwhile, so no other runner takes the op over.
	RecordFor time.Duration
	// Handoff, when set, holds args the gate of this process admitted:
	// an op found there is not read back from AIRLOCK_REQUESTS.
	Handoff ArgsHandoff
	// Group names the durable consumers (one per tool) the runner takes
	// work from; runners of one group share it. Default
	// streams.DefaultExecutorGroup.
	Group string
	// Workspaces, when set, are the only workspaces whose ops this runner
	// takes (their roots are on its host): its consumers are filtered on
	// them. Every runner of a group must serve the same set; nil serves
	// every workspace.
	Workspaces []string
	// Instance names this Airlock instance (its data dir) in its claims,
	// so that a recovery here trusts this instance's own records of its
	// own attempts (Lost.Own), and only of those. Default: a random id per
	// Runner, which takes no attempt of an earlier run for its own.
	Instance string
	// RequestTries is how many deliveries of a decided event a runner
	// reads its request for before it takes "not found" for gone and
	// fails the op REQUEST_UNAVAILABLE, a second apart; default 5. On a
	// cluster a node that has just become the requests stream's leader
	// can answer "not found" for a request it stores a moment later.
	RequestTries int
	// Host is the host name claims record; default os.Hostname().
	Host string
	// OwnerTries is how many more deliveries an op whose lost attempt only
	// its own instance can settle (Defer) waits for that instance, each
	// OwnerRetryDelay apart, before another instance ends it ambiguous;
	// default 10 and 1s.
	OwnerTries      int
	OwnerRetryDelay time.Duration
	// SweepInterval is how often the runner looks for executor records
	// (Keeper) of ops that have ended, by whichever instance; default 10s.
	SweepInterval time.Duration
	// Results, when set, keeps every completed op's result for the agent
	// that asked, before the completed event is stored (ADR 0018); nil
	// keeps none.
	Results ResultKeeper
	// Archived, when set, tells a decided event of a retry of an op that
	// left the ops stream for the archive (ADR 0026;
	// consumers/projector.Archived): the runner ends it with the archived
	// outcome and runs nothing. Nil when the ops stream keeps every op.
	Archived Archived
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Archived tells retries of archived ops from new ops
// (consumers/projector.Archived).
type Archived interface {
	// Settle returns once Duplicate knows every op that left the ops
	// stream before after, the events asked about being at or below
	// upTo (0: not known).
	Settle(ctx context.Context, after time.Time, upTo uint64) error
	// Duplicate is the archived op of which the event at seq is a retry;
	// nil when it is none.
	Duplicate(opID string, seq uint64) (*events.Op, error)
	// Restate ends the retry, whose newest event is at expect, with the
	// archived outcome of op, and returns it.
	// A lost compare-and-swap wraps oplog.ErrConflict
	// (projector.ErrRestateConflict).
	Restate(ctx context.Context, op *events.Op, expect uint64) (events.Type, any, error)
}

// ArgsHandoff hands a runner the args of an op its own process's gate
// admitted (internal/handoff.Args): ok is false when it does not hold
// those of op's request seq.
type ArgsHandoff interface {
	Take(op string, seq uint64) (args json.RawMessage, ok bool)
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.Loops <= 0 {
		c.Loops = 4
	}
	if c.Direct <= 0 {
		c.Direct = 2 * c.Loops * c.Workers
	}
	if c.ClaimTimeout <= 0 {
		c.ClaimTimeout = 30 * time.Second
	}
	if c.RecordFor <= 0 {
		c.RecordFor = 2 * c.ClaimTimeout
	}
	if c.RequestTries <= 0 {
		c.RequestTries = 5
	}
	if c.Group == "" {
		c.Group = streams.DefaultExecutorGroup
	}
	if c.Instance == "" {
		c.Instance = NewInstance()
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	c.Host = events.CleanHost(c.Host)
	if c.OwnerTries <= 0 {
		c.OwnerTries = 10
	}
	if c.OwnerRetryDelay <= 0 {
		c.OwnerRetryDelay = time.Second
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	if c.JetStream == nil || c.Registry == nil {
		return errors.New("executor: JetStream and Registry are required")
	}
	if c.ClaimTimeout < 300*time.Millisecond {
		return fmt.Errorf("executor: ClaimTimeout %s below 300ms", c.ClaimTimeout)
	}
	if !streams.ValidGroup(c.Group) {
		return fmt.Errorf("executor: group %q: %s", c.Group, streams.GroupRule)
	}
	for _, ws := range c.Workspaces {
		if !events.ValidName(ws) {
			return fmt.Errorf("executor: workspace %q is not a valid name", ws)
		}
	}
	if c.Workspaces != nil && len(c.Workspaces) == 0 {
		return errors.New("executor: Workspaces is empty: nil serves every workspace")
	}
	if !events.ValidInstance(c.Instance) {
		return fmt.Errorf("executor: instance %q is not 16 lower-case hex digits", c.Instance)
	}
	return nil
}

// NewInstance returns a fresh instance id: 16 random hex digits.
func NewInstance() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}
