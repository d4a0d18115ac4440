package results

import (
	"context"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/jspub"
	"github.com/airlock-dev/airlock/internal/oplog"
	"github.com/airlock-dev/airlock/internal/seal"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Keys says whom an agent's results are sealed to.
type Keys interface {
	// Recipient is agent's key, and false for an agent with none (its
	// results are not kept).
	Recipient(agent string) (*ecdh.PublicKey, bool)
}

// NkeyKeys seals to each agent's own nkey: its public key in the
// principal list, its seed with the agent alone (when the operator has
// moved it out of the data dir).
type NkeyKeys struct {
	// Lookup returns agent's nkey user public key ("U..."), or false.
	Lookup func(agent string) (string, bool)

	mu    sync.Mutex
	cache map[string]*ecdh.PublicKey
}

// Recipient implements Keys.
func (k *NkeyKeys) Recipient(agent string) (*ecdh.PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r, ok := k.cache[agent]; ok {
		return r, true
	}
	pub, ok := k.Lookup(agent)
	if !ok {
		return nil, false
	}
	r, err := seal.Recipient(pub)
	if err != nil {
		return nil, false
	}
	if k.cache == nil {
		k.cache = map[string]*ecdh.PublicKey{}
	}
	k.cache[agent] = r
	return r, true
}

// DeploymentKeys seals every agent's results to the deployment's own
// key, for --no-auth, where no agent has a key of its own: Airlock opens
// them for whoever asks in the agent's name.
type DeploymentKeys struct{ Opener *seal.Opener }

// Recipient implements Keys.
func (k DeploymentKeys) Recipient(string) (*ecdh.PublicKey, bool) { return k.Opener.Public(), true }

// KeyFile holds the deployment's result key, in a data dir that keeps no
// audit log (and so has no audit key to derive it from).
const KeyFile = "results.key"

// DeploymentKey derives the deployment's result key from its audit key
// (dataDir's audit.key, the same file on every data dir of a deployment),
// so that every process can open what any sealed under --no-auth. A data
// dir with no audit key gets a random KeyFile instead.
func DeploymentKey(dataDir string) (*seal.Opener, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, audit.KeyFile))
	if errors.Is(err, os.ErrNotExist) {
		b, err = ownKey(filepath.Join(dataDir, KeyFile))
	}
	if err != nil {
		return nil, fmt.Errorf("results: deployment key: %w", err)
	}
	defer clear(b)
	k, err := hkdf.Key(sha256.New, []byte(strings.TrimSpace(string(b))), nil, "airlock results --no-auth v1", 32)
	if err != nil {
		return nil, err
	}
	defer clear(k)
	priv, err := ecdh.X25519().NewPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return seal.NewOpener(priv), nil
}

// Store reads and writes AIRLOCK_RESULTS. It is safe for concurrent use.
type Store struct {
	now    func() time.Time
	js     jetstream.JetStream
	keys   Keys
	own    *seal.Opener // opens what Airlock sealed to itself; may be nil
	sealer *seal.Sealer
	log    *slog.Logger

	mu  sync.Mutex
	st  jetstream.Stream
	pub *jspub.Publisher // made on first Keep, closed by Close
}

// publisher is the store's own publisher, made on first use.
func (s *Store) publisher() (*jspub.Publisher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pub == nil {
		pub, err := jspub.New(s.js.Conn())
		if err != nil {
			return nil, err
		}
		s.pub = pub
	}
	return s.pub, nil
}

// Close releases the store's publisher; a Keep after it makes another.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pub == nil {
		return nil
	}
	err := s.pub.Close()
	s.pub = nil
	return err
}

// New returns a store. own, when not nil, is the key of DeploymentKeys:
// results sealed to it are opened for the asker (Open).
func New(js jetstream.JetStream, keys Keys, own *seal.Opener, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{js: js, keys: keys, own: own, sealer: seal.NewSealer(), log: log, now: time.Now}
}

// WithClock makes the store tell the time by now (for kept-until times),
// as the eraser does; it returns s.
func (s *Store) WithClock(now func() time.Time) *Store {
	if now != nil {
		s.now = now
	}
	return s
}

func (s *Store) stream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st != nil {
		return s.st, nil
	}
	st, err := s.js.Stream(ctx, streams.Results)
	if err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	s.st = st
	return st, nil
}

// Keep implements consumers/executor.ResultKeeper: it seals the result to the
// agent and stores it on its workspace's subject, with its op and attempt
// in headers and a TTL of the retention and streams.ResultTTLMargin.
func (s *Store) Keep(ctx context.Context, r events.KeptResult) (events.StoredResult, error) {
	ttl := r.Retention.TTL()
	if ttl <= 0 {
		return events.StoredResult{}, nil
	}
	rcpt, ok := s.keys.Recipient(r.Agent)
	if !ok {
		s.log.Warn("result not kept: the agent has no key", "op", r.OpID, "agent", r.Agent)
		return events.StoredResult{}, nil
	}
	sealed, err := s.sealer.Seal(rcpt, r.OpID, r.Result)
	if err != nil {
		return events.StoredResult{}, err
	}
	until := s.now().Add(ttl).UTC()
	// An asynchronous publisher of the store's own: no reply subscription
	// and round trip per result, as a synchronous publish would take.
	pub, err := s.publisher()
	if err != nil {
		return events.StoredResult{}, err
	}
	// No Nats-Msg-Id: a result published again after a lost
	// acknowledgement is a second copy that no completed event names,
	// never read, and removed by its TTL. Deduplication would hold an id
	// per result in the server's memory for the stream's window, for a
	// case that needs a node to die holding the publish.
	m := &nats.Msg{Subject: events.ResultSubject(r.Workspace), Data: sealed, Header: nats.Header{
		jetstream.MsgTTLHeader:         {(ttl + streams.ResultTTLMargin).String()},
		jetstream.ExpectedStreamHeader: {streams.Results},
		events.HeaderResultOp:          {r.OpID},
		events.HeaderResultAttempt:     {r.Attempt},
	}}
	ack, err := pub.Publish(m)
	var seq uint64
	if err == nil {
		// An acknowledgement lost with a node that died holding the
		// publish never comes, and the connection, to another node, does
		// not drop: the wait is bounded, and the runner publishes again.
		seq, _, err = ack.WaitAtMost(ctx, oplog.AckTimeout)
	}
	if err != nil {
		return events.StoredResult{}, fmt.Errorf("results: store: %w", err)
	}
	return events.StoredResult{Until: &until, Seq: seq}, nil
}

// ErrGone is Get's error for a result that is not stored (erased, or
// removed by its TTL).
var ErrGone = errors.New("results: not stored")

// Get returns the sealed result of op's attempt, kept at seq (the
// completed event's result_seq), or, for seq 0, on the attempt's own
// subject, as versions before result_seq kept it.
func (s *Store) Get(ctx context.Context, ws, op, attempt string, seq uint64) ([]byte, error) {
	st, err := s.stream(ctx)
	if err != nil {
		return nil, err
	}
	if seq == 0 {
		m, err := st.GetLastMsgForSubject(ctx, events.AttemptResultSubject(ws, op, attempt))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, ErrGone
		}
		if err != nil {
			return nil, fmt.Errorf("results: read: %w", err)
		}
		return m.Data, nil
	}
	m, err := s.at(ctx, st, ws, op, attempt, seq, false)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// at reads the message at seq (from the stream's leader, or by a direct
// get), ErrGone unless it is the result of op's attempt: erased or
// removed by its TTL, or, should the stream have been deleted and made
// again since the result was kept (its sequences start again at 1),
// another op's result now; that op's is left alone.
func (s *Store) at(ctx context.Context, st jetstream.Stream, ws, op, attempt string, seq uint64, leader bool) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	var err error
	if leader {
		m, err = s.leaderMsg(ctx, seq)
	} else {
		m, err = st.GetMsg(ctx, seq)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrGone
	}
	if err != nil {
		return nil, fmt.Errorf("results: read: %w", err)
	}
	if m.Subject != events.ResultSubject(ws) || m.Header.Get(events.HeaderResultOp) != op || m.Header.Get(events.HeaderResultAttempt) != attempt {
		s.log.Warn("the result's sequence holds another message: "+streams.Results+" was made again since the result was kept; taken as gone",
			"op", op, "attempt", attempt, "seq", seq, "holds_op", m.Header.Get(events.HeaderResultOp), "subject", m.Subject)
		return nil, ErrGone
	}
	return m, nil
}

// leaderMsg reads the message at seq from the stream's leader: a direct
// get, which a replica behind it may answer, could take a result just
// stored for gone, and the erasure would then leave it.
func (s *Store) leaderMsg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	return oplog.LeaderMsg(ctx, s.js, streams.Results, seq)
}

// ErrMismatch is Open's error for a result Airlock sealed to itself that
// does not open: it was changed, or is another op's.
var ErrMismatch = errors.New("results: the stored result does not open: it was changed, or is another op's")

// Open opens sealed when Airlock seals results to its own key
// (--no-auth); ok is false when it seals them to the agents', who open
// them themselves.
func (s *Store) Open(op string, sealed []byte) (plain []byte, ok bool, err error) {
	if s.own == nil {
		return nil, false, nil
	}
	plain, err = s.own.Open(op, sealed)
	if err != nil {
		return nil, false, ErrMismatch
	}
	return plain, true, nil
}

// Erase removes the kept result of op's attempt: the message at seq (the
// completed event's result_seq) once it is checked to be that result, or,
// for seq 0, every result of op on its attempts' own subjects, as versions
// before result_seq kept them. Erasing what is gone is not an error. A
// copy that no completed event names (a result stored again after a lost
// acknowledgement, or by an attempt that lost its compare-and-swap) is
// sealed to the agent too, and its TTL removes it.
func (s *Store) Erase(ctx context.Context, ws, op, attempt string, seq uint64) error {
	st, err := s.stream(ctx)
	if err != nil {
		return err
	}
	if seq == 0 {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(events.AttemptResultFilter(ws, op)))
	} else {
		err = s.deleteAt(ctx, st, ws, op, attempt, seq)
	}
	if err != nil {
		return fmt.Errorf("results: erase %s: %w", op, err)
	}
	return nil
}

// deleteAt deletes the message at seq if it is the result of op's
// attempt; what is gone, or another op's, is left.
func (s *Store) deleteAt(ctx context.Context, st jetstream.Stream, ws, op, attempt string, seq uint64) error {
	_, err := s.at(ctx, st, ws, op, attempt, seq, true)
	if errors.Is(err, ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	err = st.DeleteMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		// Refused: because the message is not there (erased meanwhile, or
		// removed by its TTL), or for a reason that holds. Only a look
		// tells.
		if _, gerr := s.leaderMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return nil
		}
	}
	return err
}

// ownKey reads path, first creating it with 32 random bytes (mode 0600)
// if it does not exist. The file appears whole or not at all (a hard
// link of a synced temporary file), so a process racing another reads
// the winner's key, never an empty file.
func ownKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if !errors.Is(err, os.ErrNotExist) {
		return checkedKey(path, b, err)
	}
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, err
	}
	if _, err := tmp.Write(k); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		b, err := os.ReadFile(path)
		return checkedKey(path, b, err)
	} else if err != nil {
		return nil, err
	}
	return k, nil
}

func checkedKey(path string, b []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("%s holds %d bytes, not a 32-byte key: restore it from another data dir of the deployment", path, len(b))
	}
	return b, nil
}
