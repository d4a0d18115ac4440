package patch

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// evidence is what an attempt will do, stored in its started event before
// any file is written, so that a recovery on any instance that serves the
// workspace can judge the attempt from the files: each file's pre- and
// post-image hash, keyed by the digest of its path (the paths are argument
// text), in patch order.
type evidence struct {
	Files []evidenceFile `json:"files"`
}

type evidenceFile struct {
	PathDigest string `json:"path_digest"`
	Action     string `json:"action"`
	Pre        string `json:"pre"`
	Post       string `json:"post"`
}

func evidenceOf(files []File) evidence {
	ev := evidence{Files: make([]evidenceFile, len(files))}
	for i, f := range files {
		ev.Files[i] = evidenceFile{PathDigest: events.Digest([]byte(f.Path)), Action: f.Action, Pre: f.Pre, Post: f.Post}
	}
	return ev
}

// Prepare checks the patch and computes every post-image, as Execute
// will, and returns the evidence of what it will write. It writes
// nothing.
func (p *Patch) Prepare(_ context.Context, c executor.Call) (json.RawMessage, error) {
	files, err := p.plan(c)
	if err != nil {
		return nil, err
	}
	return json.Marshal(evidenceOf(files))
}

// plan is every file of the patch in c, checked, read and computed.
func (p *Patch) plan(c executor.Call) ([]File, error) {
	diffs, err := p.decode(c.Args)
	if err != nil {
		return nil, err
	}
	root, err := p.openRoot(c.Workspace)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	ts, err := p.prepare(root, diffs)
	if err != nil {
		return nil, err
	}
	return filesOf(ts), nil
}

func filesOf(ts []target) []File {
	files := make([]File, len(ts))
	for i, t := range ts {
		files[i] = t.file
	}
	return files
}

// matchesEvidence checks that what Execute is about to write is what
// Prepare recorded: a file that changed in between fails the call before
// anything is written.
func matchesEvidence(files []File, recorded json.RawMessage) error {
	if recorded == nil {
		return nil
	}
	want, err := json.Marshal(evidenceOf(files))
	if err != nil {
		return err
	}
	var a, b evidence
	if json.Unmarshal(want, &a) != nil || json.Unmarshal(recorded, &b) != nil || !slices.Equal(a.Files, b.Files) {
		return events.Errorf(events.CodeOperandsChanged, "apply_patch: the files changed between the start of the attempt and its first write; nothing was written")
	}
	return nil
}

// filesFromEvidence pairs a started event's evidence with the paths of the
// patch in args, in patch order.
func (p *Patch) filesFromEvidence(args json.RawMessage, raw json.RawMessage) ([]File, error) {
	var ev evidence
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("evidence does not decode: %w", err)
	}
	diffs, err := p.decode(args)
	if err != nil {
		return nil, fmt.Errorf("the patch does not decode: %w", err)
	}
	if len(diffs) != len(ev.Files) {
		return nil, fmt.Errorf("evidence names %d files, the patch %d", len(ev.Files), len(diffs))
	}
	files := make([]File, len(diffs))
	for i, d := range diffs {
		f := ev.Files[i]
		if f.PathDigest != events.Digest([]byte(d.path)) {
			return nil, fmt.Errorf("file %d of the evidence is not the patch's", i+1)
		}
		files[i] = File{Path: d.path, Action: f.Action, Pre: f.Pre, Post: f.Post}
	}
	return files, nil
}

var _ executor.Preparer = (*Patch)(nil)
