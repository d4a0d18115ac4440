package testexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/internal/policy"
)

// Counter is the "count" tool: each execution durably creates Dir/<op id>
// holding the args (O_EXCL, fsynced file and directory), so a test can count
// executions per op after killing the process. A second execution of one
// op appends the op id to Dir/DOUBLE instead. It recovers from its own
// record: file present means done, absent means never ran.
type Counter struct {
	Dir string
	// Name is the tool name; default "count".
	Name string
	// Delay is how long a call sleeps after recording its execution, to
	// widen the window between the side effect and the stored result.
	Delay time.Duration
}

// Tool is Name, "count" by default.
func (c *Counter) Tool() string {
	if c.Name == "" {
		return "count"
	}
	return c.Name
}

// Class is write: it has a side effect.
func (c *Counter) Class() policy.Class { return policy.ClassWrite }

// Execute records one execution.
func (c *Counter) Execute(_ context.Context, call executor.Call) (json.RawMessage, error) {
	f, err := os.OpenFile(filepath.Join(c.Dir, call.OpID), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, c.double(call.OpID)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(call.Args); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := syncDir(c.Dir); err != nil {
		return nil, err
	}
	if c.Delay > 0 {
		time.Sleep(c.Delay)
	}
	return call.Args, nil
}

func (c *Counter) double(op string) error {
	if err := appendLine(filepath.Join(c.Dir, "DOUBLE"), op); err != nil {
		return err
	}
	return fmt.Errorf("count: %s executed twice", op)
}

// appendLine appends one line to a file durably.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		return err
	}
	return f.Sync()
}

// Recover reads the record, which any instance on the host reads too:
// present means the lost attempt ran. Each call
// is noted in Dir/RECOVERED, so a test can tell recoveries happened.
func (c *Counter) Recover(_ context.Context, call executor.Call, _ executor.Lost) (executor.Recovery, error) {
	if err := appendLine(filepath.Join(c.Dir, "RECOVERED"), call.OpID); err != nil {
		return executor.Recovery{}, err
	}
	b, err := os.ReadFile(filepath.Join(c.Dir, call.OpID))
	if errors.Is(err, fs.ErrNotExist) {
		return executor.Recovery{Action: executor.Rerun}, nil
	}
	if err != nil {
		return executor.Recovery{}, err
	}
	if !json.Valid(b) {
		return executor.Recovery{Action: executor.Ambiguous, Known: "record of the execution is torn"}, nil
	}
	return executor.Recovery{Action: executor.Done, Result: b}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

var _ executor.Executor = (*Counter)(nil)
