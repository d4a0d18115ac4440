package testexec

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/internal/policy"
)

// Blocker is the "block" tool: a call waits until the file Dir/release
// exists (or its context ends), then returns its args. Tests use it to hold
// an op in the executing state.
type Blocker struct {
	Dir string
}

// Tool is "block".
func (b *Blocker) Tool() string { return "block" }

// Class is read.
func (b *Blocker) Class() policy.Class { return policy.ClassRead }

// Execute waits for the release file.
func (b *Blocker) Execute(ctx context.Context, call executor.Call) (json.RawMessage, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(filepath.Join(b.Dir, "release")); err == nil {
			return call.Args, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Recover runs the call again: blocking has no effect to repeat.
func (b *Blocker) Recover(context.Context, executor.Call, executor.Lost) (executor.Recovery, error) {
	return executor.Recovery{Action: executor.Rerun}, nil
}

var _ executor.Executor = (*Blocker)(nil)
