package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/store"
)

// BenchmarkCommitOps commits ops as the projector does in a busy stream:
// batches of 256 events, each op started in one batch and completed in
// the next, with the audit log off. It reports bytes of op records per op
// (rec-B/op) besides the time.
func BenchmarkCommitOps(b *testing.B) {
	st, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	at := time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC)
	digest := "sha256:" + strings.Repeat("ab", 32)
	const batch = 256
	seq := uint64(0)
	var recBytes int
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		bt := st.NewBatch()
		for j := range batch {
			n := i + j
			// This op's started event, and the previous batch's op's
			// completed one.
			id := fmt.Sprintf("op_%040d", n)
			op, err := bt.Op(id, true)
			if err != nil {
				b.Fatal(err)
			}
			seq++
			h := events.OpHeader{OpID: id, Workspace: "bench"}
			d := &events.Decided{OpHeader: h, Request: &events.Summary{Tool: "echo", Agent: "agent", Fingerprint: digest, ArgsDigest: digest, RequestSeq: seq}, PolicyHash: digest, Reason: "allowed by rule echo", Rule: "echo"}
			if err := op.Apply(&events.Started{OpHeader: h, Attempt: fmt.Sprintf("att%019d", n), Decision: d,
				Claim: &events.Claim{Executor: "echo", WorkSeq: seq, Delivery: 1, Consumer: "airlock-gate", Runner: "1673acdb10482c47"}}, seq, at); err != nil {
				b.Fatal(err)
			}
			if n >= batch {
				prev := fmt.Sprintf("op_%040d", n-batch)
				op, err := bt.Op(prev, false)
				if err != nil {
					b.Fatal(err)
				}
				seq++
				if err := op.Apply(&events.Completed{OpHeader: events.OpHeader{OpID: prev, Workspace: "bench"}, Attempt: op.Attempt, ResultDigest: digest, ResultBytes: 42}, seq, at); err != nil {
					b.Fatal(err)
				}
			}
		}
		bt.SetApplied(seq)
		if err := bt.Commit(false); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if raw, err := store.RawOp(st, fmt.Sprintf("op_%040d", 0)); err == nil {
		recBytes = len(raw)
	}
	b.ReportMetric(float64(recBytes), "rec-B/op")
}
