package bench

// What the streams hold after a phase, and the waits until Airlock has
// settled after one: the projection caught up, the requests erased, the
// ended ops purged.

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// maxEraseWait bounds the wait for the scrubber to catch up.
const maxEraseWait = 10 * time.Minute

// requestsStored is how many request messages AIRLOCK_REQUESTS holds.
func requestsStored(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	return streamMsgs(ctx, js, streams.Requests)
}

// streamMsgs is how many messages stream holds.
func streamMsgs(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// erased waits until AIRLOCK_REQUESTS holds no request (every op of the
// run has ended, so the scrubber erases them all) and returns how long
// that took, in seconds; an error past maxEraseWait.
func erased(ctx context.Context, js jetstream.JetStream) (float64, error) {
	return emptied(ctx, js, streams.Requests)
}

// emptied waits until stream holds no message, as erased does.
func emptied(ctx context.Context, js jetstream.JetStream, stream string) (float64, error) {
	start := time.Now()
	for {
		n, err := streamMsgs(ctx, js, stream)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return time.Since(start).Seconds(), nil
		}
		if time.Since(start) > maxEraseWait {
			return 0, fmt.Errorf("%d messages still in %s %s after the last op ended: the scrubber does not keep up", n, stream, maxEraseWait)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// purged waits until the ops stream's purges have reached last, the
// ops stream's last sequence after a phase, short of the newest messages
// every purge leaves (cfg.ArchiveKeep), and returns how long it waited;
// at most archive-after and purgeWait more.
func purged(ctx context.Context, cfg Config, a *app.App, last uint64) (float64, error) {
	start := time.Now()
	if last <= cfg.ArchiveKeep {
		return 0, nil // the stream holds no more than every purge leaves
	}
	want := last + 1 - cfg.ArchiveKeep
	ctx, cancel := context.WithTimeout(ctx, cfg.archiveAfter()+purgeWait)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for a.OpsPurgedBelow() < want {
		select {
		case <-t.C:
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return 0, fmt.Errorf("the pipeline's ended ops did not leave AIRLOCK_OPS within %s (purged below %d, want %d)", cfg.archiveAfter()+purgeWait, a.OpsPurgedBelow(), want)
			}
			return 0, ctx.Err()
		}
	}
	return time.Since(start).Seconds(), nil
}

// purgeWait bounds how long past archive-after purged waits.
const purgeWait = 30 * time.Second

// settle waits until the projection has applied everything the ops
// stream holds.
func settle(ctx context.Context, a *app.App) error {
	st, err := a.JetStream.Stream(ctx, streams.Ops)
	if err != nil {
		return err
	}
	return a.Projector.WaitApplied(ctx, st.CachedInfo().State.LastSeq)
}

// storedStreams are the streams an op's messages go to.
var storedStreams = []string{streams.Requests, streams.Ops, streams.Results}

// stored counts the messages the streams took (requests, ops and results;
// erased requests included: their sequences stay taken), the messages
// they still hold and the bytes of those.
func stored(ctx context.Context, js jetstream.JetStream) (msgs, kept, bytes uint64, err error) {
	for _, name := range storedStreams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return 0, 0, 0, err
		}
		state := st.CachedInfo().State
		msgs += state.LastSeq
		kept += state.Msgs
		bytes += state.Bytes
	}
	return msgs, kept, bytes, nil
}

// lastSeqs is the last sequence of each stream stored counts.
func lastSeqs(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	seqs := make(map[string]uint64, len(storedStreams))
	for _, name := range storedStreams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		seqs[name] = st.CachedInfo().State.LastSeq
	}
	return seqs, nil
}

// subjects is how many distinct subjects stream holds.
func subjects(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.NumSubjects, nil
}

// archiveBytes is what the ops stream stores per message, and what the
// archive stores per ops message its segments cover (0 when they cover
// none).
func archiveBytes(ctx context.Context, js jetstream.JetStream) (ops, arch float64, err error) {
	st, err := js.Stream(ctx, streams.Ops)
	if err != nil {
		return 0, 0, err
	}
	if s := st.CachedInfo().State; s.Msgs > 0 {
		ops = float64(s.Bytes) / float64(s.Msgs)
	}
	end, _, err := archive.New(js).Tail(ctx)
	if err != nil || end <= 1 {
		return ops, 0, err
	}
	if st, err = js.Stream(ctx, streams.Archive); err != nil {
		return ops, 0, err
	}
	return ops, float64(st.CachedInfo().State.Bytes) / float64(end-1), nil
}
