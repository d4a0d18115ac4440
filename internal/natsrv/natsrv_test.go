package natsrv_test

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/natsrv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The standalone config in deploy/ must agree with the embedded server.
func TestDeployConfigMatchesEmbedded(t *testing.T) {
	opts, err := server.ProcessConfigFile("../../deploy/nats-server.conf")
	require.NoError(t, err)
	assert.True(t, opts.JetStream)
	assert.Equal(t, int32(natsrv.MaxPayload), opts.MaxPayload)
	assert.False(t, opts.SyncAlways)
}

func TestStartListensAndMonitors(t *testing.T) {
	s, err := natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Monitor: "127.0.0.1:0"})
	require.NoError(t, err)
	defer s.Shutdown()
	assert.NotEmpty(t, s.ClientURL())
	assert.NotNil(t, s.MonitorAddr())
	assert.True(t, s.JetStreamEnabled())

	_, err = natsrv.Start(natsrv.Config{})
	assert.Error(t, err, "DataDir is required")
	_, err = natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:http"})
	assert.Error(t, err)

	// A port in use fails at once, with the address in the error.
	taken := s.Addr().String()
	start := time.Now()
	_, err = natsrv.Start(natsrv.Config{DataDir: t.TempDir(), Listen: taken})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "address already in use")
	assert.Less(t, time.Since(start), 5*time.Second)
}
