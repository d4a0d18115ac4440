package archive_test

import (
	"context"
	"testing"

	"github.com/airlock-dev/airlock/internal/archive"
	"github.com/airlock-dev/airlock/internal/streams"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The stored ops floor never goes down: a process whose projection lags
// computes a lower floor than one another process purged below, and a
// retry that read the lower one would not wait for the ops that left
// below the higher (ADR 0026).
func TestTheOpsFloorNeverGoesDown(t *testing.T) {
	n := testenv.StartNATS(t, streams.Config{PurgeOps: true})
	ctx := context.Background()
	ahead, behind := archive.New(n.JetStream), archive.New(n.JetStream)
	f, err := ahead.Floor(ctx)
	require.NoError(t, err)
	assert.Zero(t, f, "none stored")
	require.NoError(t, ahead.RaiseFloor(ctx, 1000))
	require.NoError(t, behind.RaiseFloor(ctx, 50))
	for _, a := range []*archive.Archive{ahead, behind} {
		f, err := a.Floor(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(1000), f)
	}
	require.NoError(t, behind.RaiseFloor(ctx, 1500))
	f, err = ahead.Floor(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1500), f)
}
