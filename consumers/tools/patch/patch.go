package patch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// ToolName is the tool the executor serves.
const ToolName = "apply_patch"

// Limits.
const (
	// MaxPatchBytes bounds the patch text; a longer one is INVALID_ARGS.
	MaxPatchBytes = 1 << 20
	// DefaultMaxFiles is Config.MaxFiles when unset.
	DefaultMaxFiles = 256
	// DefaultMaxFileBytes is Config.MaxFileBytes when unset.
	DefaultMaxFileBytes = 8 << 20
)

// Config configures a Patch.
type Config struct {
	// Root returns the root directory of workspace ws, from the policy,
	// or "" when the workspace has none: its calls fail with
	// NO_WORKSPACE_ROOT and nothing runs. Required.
	Root func(ws string) string
	// LedgerDir holds one ledger file per op, written before any file
	// is. Required; created (0700) by New when missing. It should lie
	// outside every workspace root; a patch may not write inside it.
	LedgerDir string
	// MaxFiles bounds the files one patch touches; default
	// DefaultMaxFiles.
	MaxFiles int
	// MaxFileBytes bounds each file's content before and after the
	// patch; default DefaultMaxFileBytes.
	MaxFileBytes int64
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills in the defaults of what is unset.
func (c *Config) EnsureDefaults() {
	if c.MaxFiles <= 0 {
		c.MaxFiles = DefaultMaxFiles
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the config, as EnsureDefaults left it; it changes
// nothing.
func (c *Config) Validate() error {
	if c.Root == nil || c.LedgerDir == "" {
		return errors.New("apply_patch: Root and LedgerDir are required")
	}
	return nil
}

// Patch is the apply_patch executor. It is safe for concurrent use; the
// patches of one Patch are applied one at a time, so two calls never
// interleave their reads and writes.
type Patch struct {
	cfg    Config
	ledger string        // absolute LedgerDir
	sem    chan struct{} // one patch applies at a time
	put    func(*os.Root, *target) error
}

// New returns a Patch and creates the ledger directory.
func New(cfg Config) (*Patch, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.LedgerDir)
	if err != nil {
		return nil, fmt.Errorf("apply_patch: ledger dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("apply_patch: ledger dir: %w", err)
	}
	return &Patch{cfg: cfg, ledger: dir, sem: make(chan struct{}, 1), put: put}, nil
}

// Tool is "apply_patch".
func (p *Patch) Tool() string { return ToolName }

// Class is write.
func (p *Patch) Class() events.Class { return events.ClassWrite }

// File is one file a patch touched, in a result and in the ledger. Pre and
// Post are "sha256:<hex>" of the content, or "absent".
type File struct {
	Path   string `json:"path"`
	Action string `json:"action"` // ActionAdd, ActionModify or ActionDelete
	Pre    string `json:"pre"`
	Post   string `json:"post"`
}

// Result is the result of a call, in the patch's file order.
type Result struct {
	Files []File `json:"files"`
}

// target is one file of a patch, read and computed, not yet written.
type target struct {
	diff      *fileDiff
	exists    bool
	mode      fs.FileMode
	pre, post []byte
	file      File
}

// Execute applies the patch in c.Args under the workspace root: every
// path checked, every file read and every post-image computed before the
// ledger is written, then each file replaced atomically. Once writing has
// begun ctx is no longer heeded: stopping half-way would leave the patch
// half-applied. A write error undoes the files already written.
func (p *Patch) Execute(ctx context.Context, c executor.Call) (json.RawMessage, error) {
	if !safeOpID(c.OpID) {
		return nil, fmt.Errorf("apply_patch: op id %q cannot name a ledger file", c.OpID)
	}
	diffs, err := p.decode(c.Args)
	if err != nil {
		return nil, err
	}
	root, err := p.openRoot(c.Workspace)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.sem }()
	ts, err := p.prepare(root, diffs)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	files := filesOf(ts)
	if err := matchesEvidence(files, c.Evidence); err != nil {
		return nil, err
	}
	if err := p.writeLedger(ledger{Op: c.OpID, Attempt: c.Attempt, Files: files}); err != nil {
		return nil, err
	}
	if err := p.write(root, ts); err != nil {
		return nil, err
	}
	p.cfg.Logger.Debug("patch applied", "op", c.OpID, "ws", c.Workspace, "files", len(ts))
	return events.MarshalJSON(Result{Files: files})
}

// Operands returns the hash of every file the patch in args targets, by
// path relative to the workspace root. Bad args, a bad patch or a path
// that escapes are the errors Execute would return.
func (p *Patch) Operands(_ context.Context, ws string, args json.RawMessage) (map[string]string, error) {
	diffs, err := p.decode(args)
	if err != nil {
		return nil, err
	}
	root, err := p.openRoot(ws)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	infos, err := checkAll(root, diffs, p.guard(root.Name()))
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(diffs))
	for i, d := range diffs {
		if infos[i] == nil {
			out[d.path] = absent
			continue
		}
		b, _, err := readTarget(root, d.path, p.cfg.MaxFileBytes)
		if err != nil {
			return nil, fileErr(d.ref(), err)
		}
		out[d.path] = events.Digest(b)
	}
	return out, nil
}

// decode reads args strictly: one key, "patch", holding a non-empty string
// of at most MaxPatchBytes. The patch is parsed and held to MaxFiles.
func (p *Patch) decode(args json.RawMessage) ([]*fileDiff, error) {
	var m map[string]json.RawMessage
	if err := strictUnmarshal(args, &m); err != nil || m == nil {
		return nil, events.Errorf(events.CodeInvalidArgs, `apply_patch: args must be an object {"patch": "<unified diff>"}`)
	}
	raw, ok := m["patch"]
	if !ok || len(m) != 1 {
		return nil, events.Errorf(events.CodeInvalidArgs, `apply_patch: args take exactly one field, "patch"`)
	}
	var text string
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) || strictUnmarshal(raw, &text) != nil {
		return nil, events.Errorf(events.CodeInvalidArgs, "apply_patch: patch must be a string")
	}
	switch {
	case text == "":
		return nil, events.Errorf(events.CodeInvalidArgs, "apply_patch: patch is empty")
	case len(text) > MaxPatchBytes:
		return nil, events.Errorf(events.CodeInvalidArgs, "apply_patch: patch is %d bytes, over the limit of %d", len(text), MaxPatchBytes)
	}
	diffs, err := parse(text)
	if err != nil {
		return nil, err
	}
	if len(diffs) > p.cfg.MaxFiles {
		return nil, events.Errorf(events.CodeInvalidPatch, "patch touches %d files, over the limit of %d", len(diffs), p.cfg.MaxFiles)
	}
	return diffs, nil
}

// strictUnmarshal decodes exactly one JSON value.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// openRoot opens the workspace root. A workspace without one, or whose
// root is not a directory, is NO_WORKSPACE_ROOT.
func (p *Patch) openRoot(ws string) (*os.Root, error) {
	dir := p.cfg.Root(ws)
	if dir == "" {
		return nil, events.Errorf(events.CodeNoWorkspaceRoot, "apply_patch: workspace %q has no root", ws)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, events.Errorf(events.CodeNoWorkspaceRoot, "apply_patch: workspace %q root: %v", ws, err)
	}
	return root, nil
}

// guard reports, for a root directory, which relative paths lie inside the
// ledger directory; nil when the ledger is outside the root.
func (p *Patch) guard(rootDir string) func(string) bool {
	abs, err := filepath.Abs(rootDir)
	if err != nil {
		return nil
	}
	rel, err := filepath.Rel(abs, p.ledger)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	rel = filepath.ToSlash(rel)
	return func(name string) bool {
		return rel == "." || name == rel || strings.HasPrefix(name, rel+"/")
	}
}

// prepare checks every path, reads every target and computes every
// post-image. Nothing is written.
func (p *Patch) prepare(root *os.Root, diffs []*fileDiff) ([]target, error) {
	infos, err := checkAll(root, diffs, p.guard(root.Name()))
	if err != nil {
		return nil, err
	}
	ts := make([]target, len(diffs))
	for i, d := range diffs {
		t := target{diff: d, exists: infos[i] != nil, mode: 0o644}
		switch {
		case d.action == ActionAdd && t.exists:
			return nil, events.Errorf(events.CodePatchConflict, "%s: the patch adds it but it exists", d.ref())
		case d.action != ActionAdd && !t.exists:
			return nil, events.Errorf(events.CodePatchConflict, "%s: the patch changes it but it does not exist", d.ref())
		}
		t.file = File{Path: d.path, Action: d.action, Pre: absent, Post: absent}
		if t.exists {
			if t.pre, t.mode, err = readTarget(root, d.path, p.cfg.MaxFileBytes); err != nil {
				return nil, fileErr(d.ref(), err)
			}
			t.file.Pre = events.Digest(t.pre)
		}
		if t.post, err = apply(d, t.pre); err != nil {
			return nil, err
		}
		if int64(len(t.post)) > p.cfg.MaxFileBytes {
			return nil, fileErr(d.ref(), tooLarge(int64(len(t.post)), p.cfg.MaxFileBytes))
		}
		if d.action != ActionDelete {
			t.file.Post = events.Digest(t.post)
		}
		ts[i] = t
	}
	return ts, nil
}

// safeOpID reports whether id can name a ledger file.
func safeOpID(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

var (
	_ executor.Executor = (*Patch)(nil)
	_ executor.Operands = (*Patch)(nil)
)
