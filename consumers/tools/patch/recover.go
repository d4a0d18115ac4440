package patch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
)

// Recover decides a lost attempt from what it meant to write and the
// files as they are now. What it meant to write is this instance's ledger
// for its own attempt, and otherwise the evidence in the attempt's started
// event (the workspace's files are on every instance that serves it):
//
//   - its own attempt and no ledger: it never reached its first write
//     (the ledger is synced before it); Rerun.
//   - every file at its post-image: the patch took effect; Done with the
//     result Execute would have returned.
//   - every file at its pre-image: nothing was written; Rerun, and the new
//     attempt checks everything again (and overwrites the ledger).
//   - anything else: Ambiguous, Known naming each file and whether it holds
//     its pre-image, its post-image or neither.
//
// Another instance's attempt without evidence (one started by an earlier
// version) is Defer: only its ledger can tell. A ledger or evidence that
// does not decode is Ambiguous. A workspace whose root is gone is an
// error, so recovery is tried again once it is back.
func (p *Patch) Recover(_ context.Context, c executor.Call, lost executor.Lost) (executor.Recovery, error) {
	var l ledger
	var err error
	if lost.Own {
		l, err = p.readLedger(c.OpID)
	}
	switch {
	case lost.Own && errors.Is(err, fs.ErrNotExist):
		p.cfg.Logger.Info("apply_patch: no ledger, nothing was written", "op", c.OpID, "attempt", lost.Attempt)
		return executor.Recovery{Action: executor.Rerun}, nil
	case errors.Is(err, errTornLedger):
		return executor.Recovery{Action: executor.Ambiguous, Known: "apply_patch: the ledger does not decode; the files are unknown"}, nil
	case err != nil:
		return executor.Recovery{}, err
	case !lost.Own && lost.Evidence == nil:
		return executor.Recovery{Action: executor.Defer, Known: "apply_patch: the attempt's ledger is on the instance that made it; the files are unknown"}, nil
	case !lost.Own:
		files, err := p.filesFromEvidence(c.Args, lost.Evidence)
		if err != nil {
			return executor.Recovery{Action: executor.Ambiguous, Known: "apply_patch: the attempt's evidence cannot be read against its patch: " + pathless(err).Error()}, nil
		}
		l = ledger{Op: c.OpID, Attempt: lost.Attempt, Files: files}
	}
	root, err := p.openRoot(c.Workspace)
	if err != nil {
		return executor.Recovery{}, fmt.Errorf("apply_patch: recover %s: %w", c.OpID, err)
	}
	defer root.Close()
	allPre, allPost := true, true
	states := make([]string, len(l.Files))
	for i, f := range l.Files {
		cur, err := currentHash(root, f.Path)
		switch events.CodeOf(err) {
		case "":
		case events.CodePathEscape, events.CodePatchConflict:
			cur = "unreadable (" + err.Error() + ")"
		default:
			return executor.Recovery{}, fmt.Errorf("apply_patch: recover %s: %w", c.OpID, err)
		}
		isPre, isPost := cur == f.Pre, cur == f.Post
		allPre, allPost = allPre && isPre, allPost && isPost
		// Files by their place in the patch: the paths are args, and
		// Known is stored in the op's ambiguous event.
		name := fmt.Sprintf("file %d of %d", i+1, len(l.Files))
		switch {
		case isPost:
			states[i] = name + " holds its post-image"
		case isPre:
			states[i] = name + " holds its pre-image"
		default:
			states[i] = name + " holds neither: " + cur
		}
	}
	log := p.cfg.Logger.With("op", c.OpID, "attempt", lost.Attempt, "ledger_attempt", l.Attempt)
	switch {
	case allPost:
		b, err := events.MarshalJSON(Result{Files: l.Files})
		if err != nil {
			return executor.Recovery{}, fmt.Errorf("apply_patch: recover %s: %w", c.OpID, err)
		}
		log.Info("apply_patch: every file at its post-image; done")
		return executor.Recovery{Action: executor.Done, Result: b}, nil
	case allPre:
		log.Info("apply_patch: every file at its pre-image; running again")
		return executor.Recovery{Action: executor.Rerun}, nil
	}
	known := fmt.Sprintf("apply_patch: files in doubt (ledger of attempt %s): %s",
		l.Attempt, strings.Join(states, "; "))
	log.Info("apply_patch: files in doubt; ambiguous")
	return executor.Recovery{Action: executor.Ambiguous, Known: known}, nil
}
