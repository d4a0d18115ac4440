package command_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
)

func sha(b string) string {
	s := sha256.Sum256([]byte(b))
	return "sha256:" + hex.EncodeToString(s[:])
}

func TestOperands(t *testing.T) {
	f := newFixture(t)
	outside := t.TempDir()
	write := func(p, body string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	}
	write(filepath.Join(f.root, "build.sh"), "#!/bin/sh\nmake\n")
	write(filepath.Join(f.root, "sub", "data.txt"), "data")
	write(filepath.Join(outside, "secret.sh"), "#!/bin/sh\nexfiltrate\n")
	require.NoError(t, os.Symlink("build.sh", filepath.Join(f.root, "link-in")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret.sh"), filepath.Join(f.root, "link-out")))
	require.NoError(t, os.Symlink(outside, filepath.Join(f.root, "dir-out")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(f.root, "fifo"), 0o600))

	args := argv(
		"sh", // a program on PATH, no file of the root
		"./build.sh",
		filepath.Join(f.root, "sub", "data.txt"), // absolute, under the root
		"sub/../build.sh",                        // the same file again
		"link-in",                                // a link inside the root
		"link-out",                               // a link leaving it
		"dir-out/secret.sh",                      // through a directory link leaving it
		filepath.Join(outside, "secret.sh"),      // absolute, outside
		"../"+filepath.Base(outside)+"/secret.sh",
		"missing.sh", // does not exist
		"sub",        // a directory
		"fifo",       // not a regular file
		"-c", "",
	)
	got, err := f.e.Operands(context.Background(), "w", mustJSON(t, args))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"build.sh":     sha("#!/bin/sh\nmake\n"),
		"sub/data.txt": sha("data"),
		"link-in":      sha("#!/bin/sh\nmake\n"),
	}, got)

	// A changed script changes its hash.
	write(filepath.Join(f.root, "build.sh"), "#!/bin/sh\nrm -rf ~\n")
	got, err = f.e.Operands(context.Background(), "w", mustJSON(t, argv("./build.sh")))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"build.sh": sha("#!/bin/sh\nrm -rf ~\n")}, got)

	// No root: nothing to bind.
	got, err = f.e.Operands(context.Background(), "no-root", mustJSON(t, argv("./build.sh", filepath.Join(f.root, "build.sh"))))
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.NotNil(t, got)
}

func TestOperandsRootThroughSymlink(t *testing.T) {
	real := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(real, "s.sh"), []byte("x"), 0o755))
	link := filepath.Join(t.TempDir(), "ws")
	require.NoError(t, os.Symlink(real, link))
	f := newFixture(t, func(c *command.Config) { c.Root = func(string) string { return link } })
	got, err := f.e.Operands(context.Background(), "w",
		mustJSON(t, argv("s.sh", filepath.Join(link, "s.sh"), filepath.Join(real, "s.sh"))))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"s.sh": sha("x")}, got)
}

func TestOperandsMissingRoot(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	f := newFixture(t, func(c *command.Config) { c.Root = func(string) string { return missing } })
	_, err := f.e.Operands(context.Background(), "w", mustJSON(t, argv("x")))
	assert.Equal(t, events.CodeNoWorkspaceRoot, events.CodeOf(err))
}
