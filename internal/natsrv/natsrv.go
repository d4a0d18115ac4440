package natsrv

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// MaxPayload is the largest message the embedded server accepts. It is
// above events.MaxRequestBytes so that an oversized request still reaches
// the gate and is rejected with REQUEST_TOO_LARGE rather than dropped by the
// transport.
const MaxPayload = 2 << 20

// StoreDir is the embedded server's JetStream store, under the data dir.
const StoreDir = "jetstream"

// Config configures the embedded server. The zero value listens nowhere.
type Config struct {
	// DataDir holds JetStream's store, in DataDir/jetstream. Required.
	DataDir string
	// Listen is the client address, host:port; empty for in-process only.
	// Port 0 picks a free port (-1 is the same).
	Listen string
	// Monitor is the HTTP monitoring address (/varz, /jsz, /healthz);
	// empty for none.
	Monitor string
	// SyncAlways fsyncs every write before it is acknowledged. Without it
	// the store fsyncs every SyncInterval: a process crash loses nothing,
	// a power loss may lose what was written since the last sync.
	SyncAlways bool
	// SyncInterval is the periodic fsync interval when SyncAlways is off;
	// zero keeps the NATS default (2 minutes).
	SyncInterval time.Duration
	// Logger receives the server's log at Debug and above; nil for none.
	Logger *slog.Logger
	// AuthFile is a nats-server configuration file whose accounts and
	// users the server takes, with their imports, exports, JetStream
	// setting and permissions (internal/authority's Set.WriteServerConfig
	// writes one); the rest of the file is ignored. With it, every client,
	// in-process ones too, must authenticate as one of its users, and
	// JetStream runs only in the accounts that enable it. Without it there
	// is one account, with JetStream, and any client may connect and do
	// anything. JetStream keeps each account's streams apart on disk, so
	// Start refuses a store whose streams belong to an account it will not
	// run JetStream in: those written with an AuthFile, when started
	// without one, and the other way round.
	AuthFile string
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*server.Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("natsrv: DataDir is required")
	}
	opts := &server.Options{
		ServerName:   "airlock",
		JetStream:    true,
		StoreDir:     filepath.Join(cfg.DataDir, StoreDir),
		MaxPayload:   MaxPayload,
		SyncAlways:   cfg.SyncAlways,
		SyncInterval: cfg.SyncInterval,
		NoSigs:       true,
		DontListen:   cfg.Listen == "",
	}
	if cfg.AuthFile != "" {
		if err := loadAuth(opts, cfg.AuthFile); err != nil {
			return nil, fmt.Errorf("natsrv: %w", err)
		}
	}
	if err := checkStore(opts); err != nil {
		return nil, fmt.Errorf("natsrv: %w", err)
	}
	if cfg.Listen != "" {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("natsrv: listen: %w", err)
		}
		if err := free(host, port); err != nil {
			return nil, fmt.Errorf("natsrv: listen: %w", err)
		}
		opts.Host, opts.Port = host, port
	}
	if cfg.Monitor != "" {
		host, port, err := splitHostPort(cfg.Monitor)
		if err != nil {
			return nil, fmt.Errorf("natsrv: monitor: %w", err)
		}
		if err := free(host, port); err != nil {
			return nil, fmt.Errorf("natsrv: monitor: %w", err)
		}
		opts.HTTPHost, opts.HTTPPort = host, port
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsrv: %w", err)
	}
	if cfg.Logger != nil {
		s.SetLoggerV2(&logAdapter{l: cfg.Logger}, false, false, false)
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, errors.New("natsrv: server not ready within 30s")
	}
	return s, nil
}

func splitHostPort(hp string) (string, int, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// free fails fast when something already listens on a fixed port: the
// server itself would only log it and never become ready.
func free(host string, port int) error {
	if port == server.RANDOM_PORT {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// logAdapter sends the server's log to slog.
type logAdapter struct{ l *slog.Logger }

func (a *logAdapter) Noticef(format string, v ...any) {
	a.l.Debug(fmt.Sprintf(format, v...), "component", "nats")
}
func (a *logAdapter) Warnf(format string, v ...any) {
	a.l.Warn(fmt.Sprintf(format, v...), "component", "nats")
}
func (a *logAdapter) Fatalf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), "component", "nats")
}
func (a *logAdapter) Errorf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), "component", "nats")
}
func (a *logAdapter) Debugf(format string, v ...any) {}
func (a *logAdapter) Tracef(format string, v ...any) {}

var _ server.Logger = (*logAdapter)(nil)
