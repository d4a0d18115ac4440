package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/cmd/airlock/internal/progress"
	"github.com/airlock-dev/airlock/consumers/projector"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/authority"
	"github.com/airlock-dev/airlock/internal/store"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

type replayResult struct {
	Into    string  `json:"into"`
	Applied uint64  `json:"applied"`
	Size    int64   `json:"size"`
	Root    string  `json:"root"`
	Origin  string  `json:"origin"`
	TookMS  float64 `json:"took_ms"`
	PerSec  float64 `json:"events_per_s"`
}

func newReplay(g *globals) *cobra.Command {
	var (
		into   string
		newKey bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "replay --into DIR",
		Short: "Rebuild the projection and the audit log from the streams into an empty data dir",
		Long: `Replay folds every event of AIRLOCK_OPS, from the first, into a new
projection and audit log in DIR, exactly as the running projector did (the
events of ended ops that left the stream are read from AIRLOCK_ARCHIVE, in
their places), and
signs a checkpoint at the end. The rebuilt log's root equals the live one's
at the same size; compare them with ` + "`airlock audit verify --json`" + `.

It reads the streams at --server with the service credential of --data
(creds/airlock.creds) or --creds, and signs with --data's audit key, so
that the rebuilt log has the live log's origin; --new-key signs with a new
one instead.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if entries, err := os.ReadDir(into); err == nil && len(entries) > 0 {
				return usageError("--into %s is not empty", into)
			}
			res, err := replay(cmd.Context(), g, into, newKey, progress.Enabled(os.Stderr, asJSON))
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), res)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replayed %d events into %s in %.0f ms (%.0f/s)\n  log:  %s, %d leaves\n  root: %s\n",
				res.Applied, res.Into, res.TookMS, res.PerSec, res.Origin, res.Size, res.Root)
			return nil
		},
	}
	cmd.Flags().StringVar(&into, "into", "", "the empty data dir to rebuild into")
	_ = cmd.MarkFlagRequired("into")
	cmd.Flags().BoolVar(&newKey, "new-key", false, "sign the rebuilt log with a new audit key instead of --data's")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// replayPoll is how often replay reads how far the projector has got, for
// its progress bar.
const replayPoll = 100 * time.Millisecond

// replay rebuilds into from the streams; with bar, it draws its progress
// on stderr.
func replay(ctx context.Context, g *globals, into string, newKey, bar bool) (*replayResult, error) {
	if err := os.MkdirAll(into, 0o700); err != nil {
		return nil, err
	}
	var key *audit.Key
	var err error
	if newKey {
		key, _, err = audit.LoadOrCreateKey(into)
	} else {
		key, err = copyKey(g.data, into)
	}
	if err != nil {
		return nil, err
	}
	nc, err := g.connect(authority.ServiceName)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(into, app.StoreDir))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	stream, err := js.Stream(ctx, streams.Ops)
	if err != nil {
		return nil, fmt.Errorf("replay: %s: %w", streams.Ops, err)
	}
	state := stream.CachedInfo().State
	target := state.LastSeq
	start := time.Now()
	// Ended ops that left the stream are read from the archive, in their
	// places (ADR 0026); a deployment made before it has none.
	var arch *archive.Archive
	if _, err := js.Stream(ctx, streams.Archive); err == nil {
		arch = archive.New(js)
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("replay: %s: %w", streams.Archive, err)
	}
	p, err := projector.New(projector.Config{
		JetStream: js, Store: st, AuditKey: key, Archive: arch,
		// One checkpoint, at the end: the live log's roots at every size
		// are the same, whenever they were signed.
		CheckpointEvery: 1 << 30, CheckpointInterval: 24 * time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- p.Run(rctx) }()
	// WaitApplied ends with rctx: when Run fails, cancel it.
	waitErr := make(chan error, 1)
	go func() { waitErr <- p.WaitApplied(rctx, target) }()
	// The bar counts the messages applied since the stream's first,
	// polled: the projector has no hook for it.
	var pr *progress.Reporter // nil: no bar
	base := state.FirstSeq - min(state.FirstSeq, 1)
	applied := func() int64 { a := p.Applied(); return int64(a - min(a, base)) }
	if bar {
		pr = progress.New(os.Stderr, "replay", int64(target-base))
	}
	tick := time.NewTicker(replayPoll)
	defer tick.Stop()
	var err2 error
wait:
	for {
		select {
		case <-tick.C:
			pr.Set(applied())
		case err2 = <-waitErr:
			cancel()
			if err := <-runErr; err != nil {
				err2 = err
			}
			break wait
		case err2 = <-runErr:
			cancel()
			<-waitErr
			if err2 == nil {
				err2 = errors.New("replay: the projector stopped before it caught up")
			}
			break wait
		}
	}
	pr.Set(applied())
	pr.Finish()
	if err2 != nil {
		return nil, err2
	}
	b := st.NewBatch()
	cp, err := b.Checkpoint(key)
	if err != nil {
		return nil, err
	}
	if err := b.Commit(true); err != nil {
		return nil, err
	}
	took := time.Since(start)
	return &replayResult{
		Into: into, Applied: p.Applied(), Size: cp.Size, Root: cp.Root.String(), Origin: key.Origin,
		TookMS: float64(took.Microseconds()) / 1000, PerSec: float64(p.Applied()) / took.Seconds(),
	}, nil
}

// copyKey gives into the audit key of data.
func copyKey(data, into string) (*audit.Key, error) {
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{audit.PubFile, 0o644}, {audit.KeyFile, 0o600}} {
		b, err := os.ReadFile(filepath.Join(data, f.name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("replay: %s has no audit key (%s); give --data or use --new-key", data, f.name)
		}
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(into, f.name), b, f.mode); err != nil {
			return nil, err
		}
	}
	return audit.LoadKey(into)
}
