package command_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/tools/command"
)

// BenchmarkExecTrue runs /bin/true through Execute: argument checks, the
// ledger (two fsynced records and a pid update), process group, pipes.
// Compare with BenchmarkForkExecTrue for the overhead.
func BenchmarkExecTrue(b *testing.B) {
	f := newFixture(b)
	for b.Loop() {
		c := call(b, "w", argv("/bin/true"))
		if _, err := f.e.Execute(context.Background(), c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForkExecTrue is a bare os/exec run of /bin/true.
func BenchmarkForkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrueLedgerTmpfs is BenchmarkExecTrue with the ledger on
// tmpfs (/dev/shm), where fsync costs nothing: the difference is what the
// ledger's durability costs on the disk under t.TempDir().
func BenchmarkExecTrueLedgerTmpfs(b *testing.B) {
	shm, err := os.MkdirTemp("/dev/shm", "airlock-exec-bench-*")
	if err != nil {
		b.Skip("no /dev/shm")
	}
	b.Cleanup(func() { os.RemoveAll(shm) })
	f := newFixture(b, func(c *command.Config) { c.LedgerDir = shm })
	for b.Loop() {
		if _, err := f.e.Execute(context.Background(), call(b, "w", argv("/bin/true"))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrueBubblewrap is BenchmarkExecTrue inside bubblewrap.
func BenchmarkExecTrueBubblewrap(b *testing.B) {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skip("bwrap not on PATH")
	}
	f := newFixture(b, func(c *command.Config) { c.Bubblewrap = path })
	for b.Loop() {
		if _, err := f.e.Execute(context.Background(), call(b, "w", argv("/bin/true"))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrueParallel is BenchmarkExecTrue 16 calls at a time, as
// airlock bench's exec phase runs them, with the ledger as an embedded
// interval-fsync server has it (no fsync) and forgotten after each call,
// as the runner does once the outcome is stored. Compare with
// BenchmarkForkExecTrueParallel: the difference is the executor's own
// cost per call, without the pipeline's.
func BenchmarkExecTrueParallel(b *testing.B) {
	f := newFixture(b, func(c *command.Config) { c.LedgerNoSync = true })
	b.SetParallelism(8) // 16 goroutines on 2 CPUs
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c := call(b, "w", argv("/bin/true"))
			if _, err := f.e.Execute(context.Background(), c); err != nil {
				b.Error(err)
				return
			}
			if err := f.e.Forget(context.Background(), c.OpID); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkForkExecTrueParallel is a bare os/exec run of /bin/true, 16 at
// a time.
func BenchmarkForkExecTrueParallel(b *testing.B) {
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkParseArgs: an exec call's args are parsed by the gate (their
// operands) and by the executor, once each.
func BenchmarkParseArgs(b *testing.B) {
	raw := []byte(`{"argv":["/bin/sh","-c","echo hello >> /tmp/marker"],"timeout_ms":5000}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := command.ParseArgs(raw, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}
