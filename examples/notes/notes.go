// Package notes is an Airlock executor written outside Airlock: a tool
// "note" that appends one line to a notes file, once per op. It keeps a
// record per op beside the file, so a lost attempt is recovered from it:
// Done when the line is there, Rerun when this instance's own attempt left
// no record, Ambiguous for another instance's (its records are on its
// disk).
package notes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// Notes is the executor.
type Notes struct {
	dir string
	mu  sync.Mutex
}

// New returns a Notes keeping its file and records under dir.
func New(dir string) *Notes { return &Notes{dir: dir} }

var _ executor.Executor = (*Notes)(nil)

// Tool implements executor.Executor.
func (*Notes) Tool() string { return "note" }

// Class implements executor.Executor: it writes.
func (*Notes) Class() events.Class { return events.ClassWrite }

type args struct {
	Line string `json:"line"`
}

// Execute appends the line, unless this op's line is there already.
func (n *Notes) Execute(ctx context.Context, c executor.Call) (json.RawMessage, error) {
	var a args
	if err := json.Unmarshal(c.Args, &a); err != nil || a.Line == "" {
		return nil, events.Errorf(events.CodeInvalidArgs, "want {\"line\": \"...\"}")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if done, err := n.done(c.OpID); err != nil || done != nil {
		return done, err
	}
	f, err := os.OpenFile(filepath.Join(n.dir, "notes.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintln(f, a.Line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	result := json.RawMessage(fmt.Sprintf(`{"appended":%d}`, len(a.Line)+1))
	return result, os.WriteFile(n.record(c.OpID), result, 0o600)
}

// Recover implements executor.Executor.
func (n *Notes) Recover(ctx context.Context, c executor.Call, lost executor.Lost) (executor.Recovery, error) {
	done, err := n.done(c.OpID)
	switch {
	case err != nil:
		return executor.Recovery{}, err
	case done != nil:
		return executor.Recovery{Action: executor.Done, Result: done}, nil
	case lost.Own:
		return executor.Recovery{Action: executor.Rerun}, nil
	}
	return executor.Recovery{Action: executor.Ambiguous, Known: "another instance's attempt; its records are on its disk"}, nil
}

func (n *Notes) record(op string) string { return filepath.Join(n.dir, op+".done") }

func (n *Notes) done(op string) (json.RawMessage, error) {
	b, err := os.ReadFile(n.record(op))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}
