package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// InstanceFile holds the data dir's instance id: made on first start, kept
// for the data dir's life. Claims carry it, so that a recovery trusts this
// data dir's ledgers for its own attempts only. A copy of a data dir must
// not run beside its original: remove the file from the copy.
const InstanceFile = "instance"

// loadInstance reads the data dir's instance id, making one on first
// start.
func loadInstance(dir string) (string, error) {
	p := filepath.Join(dir, InstanceFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if !events.ValidInstance(id) {
			return "", fmt.Errorf("app: %s holds %q, not an instance id (16 lower-case hex digits): restore it, or remove it to make a new one", p, id)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("app: instance id: %w", err)
	}
	id := executor.NewInstance()
	if err := writeSynced(p, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("app: instance id: %w", err)
	}
	return id, nil
}

// writeSynced writes b to p through a synced temporary file and a rename.
func writeSynced(p string, b []byte) error {
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, p)
}

// localServes says whether this process's executors serve tool in ws.
func localServes(reg *executor.Registry, workspaces []string) func(ws, tool string) bool {
	return func(ws, tool string) bool {
		if _, ok := reg.Lookup(tool); !ok {
			return false
		}
		return workspaces == nil || slices.Contains(workspaces, ws)
	}
}

// ownerTries is how many redeliveries, a second apart, make up wait; zero
// keeps the runner's default.
func ownerTries(wait time.Duration) int {
	if wait <= 0 {
		return 0
	}
	return max(1, int((wait+time.Second-1)/time.Second))
}
