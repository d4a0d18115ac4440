package natsrv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestZZPacedRaw(t *testing.T) {
	if os.Getenv("ZZPACE") == "" {
		t.Skip()
	}
	dir := t.TempDir()
	s, err := natsrv.Start(natsrv.Config{DataDir: dir})
	require.NoError(t, err)
	defer s.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(s))
	require.NoError(t, err)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	require.NoError(t, err)
	rate := 10000.0
	if r := os.Getenv("ZZRATE"); r != "" {
		fmt.Sscan(r, &rate)
	}
	n := 100000
	payload := make([]byte, 700)
	lat := make([]time.Duration, n)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		time.Sleep(time.Until(at))
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := js.Publish(ctx, fmt.Sprintf("t.w.op%d.echo.x", i), payload)
			if err != nil {
				panic(err)
			}
			lat[i] = time.Since(at)
		}(i)
	}
	wg.Wait()
	var slow []string
	last := -1000
	var worst time.Duration
	for i, d := range lat {
		if d > 5*time.Millisecond {
			if i-last > 50 {
				if worst > 0 {
					slow[len(slow)-1] += fmt.Sprintf(" max %v", worst.Round(time.Millisecond))
				}
				slow = append(slow, fmt.Sprintf("at %.3fs (op %d)", float64(i)/rate, i))
				worst = 0
			}
			last = i
			worst = max(worst, d)
		}
	}
	if worst > 0 {
		slow[len(slow)-1] += fmt.Sprintf(" max %v", worst.Round(time.Millisecond))
	}
	blks, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "T", "msgs", "*.blk"))
	for _, b := range blks {
		fi, _ := os.Stat(b)
		t.Logf("%s %d %s", filepath.Base(b), fi.Size(), fi.ModTime().Sub(start))
	}
	s2 := slices.Clone(lat)
	slices.Sort(s2)
	t.Logf("p50 %v p99 %v p999 %v max %v; %d slow (>10ms): %v", s2[n/2], s2[n*99/100], s2[n*999/1000], s2[n-1], len(slow), slow[:min(len(slow), 60)])
}
