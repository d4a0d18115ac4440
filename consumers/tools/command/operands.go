package command

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-dev/airlock/events"
)

// Operands returns the content hash ("sha256:<hex>") of every argv entry
// that names an existing regular file inside the workspace root (a path
// relative to the root, or an absolute path under it), keyed by its path
// relative to the root. Symbolic links are resolved; an entry whose
// resolved path leaves the root is ignored, as are entries naming nothing,
// directories and other non-regular files. A workspace without a root
// returns an empty map; one whose root does not exist, NO_WORKSPACE_ROOT.
// Args Execute would refuse before running anything are refused the same
// way (INVALID_ARGS, PRIVILEGE_ESCALATION), so the gate denies them
// before a hold is ever asked for. The caller owns the map.
func (e *Exec) Operands(ctx context.Context, ws string, args json.RawMessage) (map[string]string, error) {
	a, err := ParseArgs(args, e.cfg.MaxTimeout)
	if err != nil {
		return nil, err
	}
	if err := CheckEscalation(a.Argv); err != nil {
		return nil, err
	}
	out := map[string]string{}
	root := e.root(ws)
	if root == "" {
		return out, nil
	}
	absRoot, err := filepath.Abs(root)
	if err == nil {
		root, err = filepath.EvalSymlinks(absRoot)
	}
	if err != nil {
		return nil, events.Errorf(events.CodeNoWorkspaceRoot, "exec: workspace %q root: %v", ws, err)
	}
	for _, arg := range a.Argv {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if arg == "" {
			continue
		}
		p := arg
		if !filepath.IsAbs(p) {
			p = filepath.Join(absRoot, p)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue // missing, or not a path at all
		}
		if _, ok := within(root, real); !ok {
			continue
		}
		key, ok := within(absRoot, filepath.Clean(p))
		if !ok {
			if key, ok = within(root, filepath.Clean(p)); !ok {
				key, _ = within(root, real)
			}
		}
		sum, ok, err := hashRegular(real)
		if err != nil {
			// Neither the path nor the file's name goes into the message:
			// it ends up in the op's events.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("exec: hashing an operand: %w", err)
		}
		if ok {
			out[key] = sum
		}
	}
	return out, nil
}

// within returns p relative to root if p is root or under it.
func within(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// hashRegular hashes the regular file at p; ok is false for anything
// else. It opens without blocking, so a FIFO swapped in does not hang it.
func hashRegular(p string) (sum string, ok bool, err error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", false, nil // gone, or unreadable: nothing it could hash
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", false, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", false, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), true, nil
}
