package apptest

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/cmd/airlock/internal/app"
	"github.com/airlock-dev/airlock/internal/testenv"
	"github.com/airlock-dev/airlock/producers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// StartApp starts a whole Airlock listening on a random local port, with
// its data in cfg.DataDir (a temporary directory when empty); it shuts down
// at the end of the test, after CheckEventSchemas has checked what it
// stored.
func StartApp(t testing.TB, cfg app.Config) *app.App {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Listen == "" && cfg.NATSURL == "" {
		cfg.Listen = "127.0.0.1:-1"
	}
	a, err := app.Start(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Every event the test made the app store fits its schema.
		checkAppEvents(t, a, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, a.Shutdown(ctx))
	})
	return a
}

// Client connects a new producers client to url; both close at the end of
// the test.
func Client(t testing.TB, url string, opts ...producers.Option) (*producers.Client, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	c, err := producers.New(nc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		nc.Close()
	})
	return c, nc
}

// checkAppEvents is CheckEventSchemas on a's streams, through a's own
// connection while a still runs. When the test shut a down itself, the
// streams are read through a new connection to an external server
// (cfg.NATSURL, cfg.NATSOptions); an embedded server went with the app,
// and that is said in the log.
func checkAppEvents(t testing.TB, a *app.App, cfg app.Config) {
	t.Helper()
	if _, bench := t.(*testing.B); bench {
		return // benchmarks fill the streams far beyond what a test does
	}
	if a.Conn != nil && a.Conn.IsConnected() {
		testenv.CheckEventSchemas(t, a.JetStream)
		return
	}
	if cfg.NATSURL == "" {
		t.Logf("event schemas: not checked: the app and its embedded server are shut down")
		return
	}
	nc, err := nats.Connect(cfg.NATSURL, cfg.NATSOptions...)
	if err != nil {
		t.Logf("event schemas: not checked: the app is shut down, and %s: %v", cfg.NATSURL, err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Errorf("event schemas: %v", err)
		return
	}
	testenv.CheckEventSchemas(t, js)
}
