package patch_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// git runs git in dir with no user or system configuration.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return string(out)
}

// randomText returns up to n short lines, ending in a newline or not.
func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	lines := r.IntN(n + 1)
	for i := range lines {
		fmt.Fprintf(&b, "l%d-%d", i, r.IntN(5)) // repeats make context ambiguous
		if i < lines-1 || r.IntN(4) > 0 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// edit changes some lines of s: replaces, inserts, deletes, and may flip
// the final newline.
func edit(r *rand.Rand, s string) string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for range 1 + r.IntN(4) {
		i := r.IntN(len(lines) + 1)
		switch r.IntN(3) {
		case 0:
			lines = append(lines[:i], append([]string{fmt.Sprintf("new%d\n", r.IntN(100))}, lines[i:]...)...)
		case 1:
			if i < len(lines) {
				lines = append(lines[:i], lines[i+1:]...)
			}
		case 2:
			if i < len(lines) {
				lines[i] = fmt.Sprintf("changed%d\n", r.IntN(100))
			}
		}
	}
	out := strings.Join(lines, "")
	if out != "" && r.IntN(4) == 0 {
		if strings.HasSuffix(out, "\n") {
			out = strings.TrimSuffix(out, "\n")
		} else {
			out += "\n"
		}
	}
	return out
}

// TestGitDiffRoundTrip applies real git output: random files, random
// edits, adds and deletes, at several context sizes, and checks the result
// equals what git saw.
func TestGitDiffRoundTrip(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	r := rand.New(rand.NewPCG(4, 2))
	var noEOL, deletes, empties int // the forms the rounds exercised
	for round := range 12 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			repo := t.TempDir()
			git(t, repo, "init", "-q")
			before := map[string]string{}
			for i := range 5 {
				name := fmt.Sprintf("d%d/f%d.txt", i%2, i)
				before[name] = randomText(r, 30)
				require.NoError(t, os.MkdirAll(filepath.Join(repo, filepath.Dir(name)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(repo, name), []byte(before[name]), 0o644))
			}
			git(t, repo, "add", "-A")
			git(t, repo, "commit", "-q", "-m", "before")

			after := map[string]string{}
			for name, s := range before {
				switch r.IntN(5) {
				case 0:
					require.NoError(t, os.Remove(filepath.Join(repo, name)))
				case 1:
					after[name] = s
				default:
					after[name] = edit(r, s)
					require.NoError(t, os.WriteFile(filepath.Join(repo, name), []byte(after[name]), 0o644))
				}
			}
			added := fmt.Sprintf("new/dir/n%d.txt", round)
			after[added] = randomText(r, 10)
			require.NoError(t, os.MkdirAll(filepath.Join(repo, "new/dir"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(repo, added), []byte(after[added]), 0o644))
			git(t, repo, "add", "-A")

			for _, ctxLines := range []string{"-U0", "-U1", "-U3"} {
				diff := git(t, repo, "diff", "--cached", "--no-renames", "--no-color", "--no-ext-diff", ctxLines)
				noEOL += strings.Count(diff, "\\ No newline at end of file")
				deletes += strings.Count(diff, "deleted file mode")
				empties += strings.Count(diff, "+0,0 @@")
				e := newEnv(t)
				for name, s := range before {
					e.write(t, name, s)
				}
				_, _, err := e.run(t, "op_git", diff)
				require.NoError(t, err, "diff %s:\n%s", ctxLines, diff)
				for name := range before {
					if s, ok := after[name]; ok {
						assert.Equal(t, s, e.read(t, name), "%s %s", ctxLines, name)
					} else {
						assert.NoFileExists(t, filepath.Join(e.root, name))
					}
				}
				assert.Equal(t, after[added], e.read(t, added))
			}
		})
	}
	t.Logf("exercised %d no-newline markers, %d deletes, %d hunks emptying a side", noEOL, deletes, empties)
	assert.Positive(t, noEOL)
	assert.Positive(t, deletes)
}
