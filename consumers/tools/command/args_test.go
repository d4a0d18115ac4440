package command_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
)

func TestParseArgs(t *testing.T) {
	a, err := command.ParseArgs([]byte(`{"argv":["ls","-l"]}`), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, command.Args{Argv: []string{"ls", "-l"}}, a)
	assert.Equal(t, 5*time.Second, a.Timeout(5*time.Second))

	a, err = command.ParseArgs([]byte(` {"timeout_ms": 60000, "argv": ["x"]} `), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, a.Timeout(5*time.Second))

	argvMax := `{"argv":[` + strings.Repeat(`"x",`, command.MaxArgv-1) + `"x"]}`
	_, err = command.ParseArgs([]byte(argvMax), time.Minute)
	assert.NoError(t, err, "MaxArgv entries")
	bytesMax := `{"argv":["` + strings.Repeat("x", command.MaxArgvBytes) + `"]}`
	_, err = command.ParseArgs([]byte(bytesMax), time.Minute)
	assert.NoError(t, err, "MaxArgvBytes")
}

// TestBadArgs: every malformed args is INVALID_ARGS from Execute, and
// nothing ran (each would create the probe) or was recorded.
func TestBadArgs(t *testing.T) {
	f := newFixture(t, func(c *command.Config) { c.MaxTimeout = time.Minute })
	probe := filepath.Join(f.root, "PROBE")
	touch := `"sh","-c","touch PROBE"`
	cases := []struct{ name, args string }{
		{"empty", ``},
		{"not json", `argv`},
		{"null", `null`},
		{"array", `[` + touch + `]`},
		{"string", `"touch PROBE"`},
		{"number", `1`},
		{"missing argv", `{}`},
		{"missing argv with timeout", `{"timeout_ms":100}`},
		{"null argv", `{"argv":null}`},
		{"empty argv", `{"argv":[]}`},
		{"argv string", `{"argv":"touch PROBE"}`},
		{"argv object", `{"argv":{"0":"touch"}}`},
		{"argv numbers", `{"argv":["touch",1]}`},
		{"argv nested", `{"argv":["touch",["PROBE"]]}`},
		{"argv null entry", `{"argv":[` + touch + `,null]}`},
		{"argv bool entry", `{"argv":[` + touch + `,true]}`},
		{"argv0 empty", `{"argv":["",` + touch + `]}`},
		{"nul byte", `{"argv":[` + touch + `,"a\u0000b"]}`},
		{"nul byte in argv0", `{"argv":["sh\u0000",` + touch + `]}`},
		{"too many entries", `{"argv":[` + touch + strings.Repeat(`,"x"`, command.MaxArgv-2) + `]}`},
		{"too many bytes", `{"argv":[` + touch + `,"` + strings.Repeat("x", command.MaxArgvBytes) + `"]}`},
		{"unknown field", `{"argv":[` + touch + `],"cwd":"/"}`},
		{"unknown field env", `{"argv":[` + touch + `],"env":{"A":"b"}}`},
		{"field case", `{"Argv":[` + touch + `]}`},
		{"repeated field", `{"argv":["true"],"argv":[` + touch + `]}`},
		{"timeout zero", `{"argv":[` + touch + `],"timeout_ms":0}`},
		{"timeout negative", `{"argv":[` + touch + `],"timeout_ms":-5}`},
		{"timeout fraction", `{"argv":[` + touch + `],"timeout_ms":1.5}`},
		{"timeout exponent", `{"argv":[` + touch + `],"timeout_ms":1e3}`},
		{"timeout string", `{"argv":[` + touch + `],"timeout_ms":"100"}`},
		{"timeout null", `{"argv":[` + touch + `],"timeout_ms":null}`},
		{"timeout above max", `{"argv":[` + touch + `],"timeout_ms":60001}`},
		{"timeout overflow", `{"argv":[` + touch + `],"timeout_ms":99999999999999999999}`},
		{"trailing data", `{"argv":[` + touch + `]} {}`},
		{"trailing garbage", `{"argv":[` + touch + `]}x`},
		{"truncated", `{"argv":[` + touch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.e.Execute(context.Background(), call(t, "w", []byte(tc.args)))
			require.Error(t, err)
			assert.Equal(t, events.CodeInvalidArgs, events.CodeOf(err), "%v", err)
			assert.NoFileExists(t, probe)
			assert.Empty(t, f.ledgerEntries(t))
			// Operands refuses them the same way.
			_, err = f.e.Operands(context.Background(), "w", []byte(tc.args))
			assert.Equal(t, events.CodeInvalidArgs, events.CodeOf(err), "%v", err)
		})
	}
	// The control: the same argv, well formed, runs.
	r := f.run(t, call(t, "w", []byte(`{"argv":[`+touch+`],"timeout_ms":60000}`)))
	assert.Equal(t, 0, r.ExitCode)
	assert.FileExists(t, probe)
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "bwrap")
	require.NoError(t, os.WriteFile(notExec, nil, 0o644))
	for _, tc := range []struct {
		name string
		cfg  command.Config
	}{
		{"no ledger", command.Config{}},
		{"bad env name", command.Config{LedgerDir: dir, EnvAllow: []string{"A=B"}}},
		{"empty env name", command.Config{LedgerDir: dir, EnvAllow: []string{""}}},
		{"default above max", command.Config{LedgerDir: dir, DefaultTimeout: time.Hour, MaxTimeout: time.Minute}},
		{"negative timeout", command.Config{LedgerDir: dir, DefaultTimeout: -time.Second}},
		{"negative output", command.Config{LedgerDir: dir, MaxOutput: -1}},
		{"result too large", command.Config{LedgerDir: dir, MaxResult: events.MaxResultBytes + 1}},
		{"result too small", command.Config{LedgerDir: dir, MaxResult: 100}},
		{"relative bwrap", command.Config{LedgerDir: dir, Bubblewrap: "bwrap"}},
		{"missing bwrap", command.Config{LedgerDir: dir, Bubblewrap: "/nonexistent/bwrap"}},
		{"bwrap not executable", command.Config{LedgerDir: dir, Bubblewrap: notExec}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := command.New(tc.cfg)
			assert.Error(t, err)
		})
	}
	cfg := command.Config{LedgerDir: filepath.Join(dir, "new", "ledger")}
	cfg.EnsureDefaults()
	require.NoError(t, cfg.Validate())
	assert.Equal(t, []string{"PATH"}, cfg.EnvAllow)
	assert.Equal(t, command.DefaultTimeout, cfg.DefaultTimeout)
	assert.Equal(t, command.DefaultMaxTimeout, cfg.MaxTimeout)
	assert.Equal(t, command.DefaultMaxOutput, cfg.MaxOutput)
	assert.Equal(t, events.MaxResultBytes, cfg.MaxResult)
	assert.NotNil(t, cfg.Logger)
	_, err := command.New(cfg)
	require.NoError(t, err)
	assert.DirExists(t, cfg.LedgerDir)
}
