package events_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/events"
)

// The documented examples of every event type, one per file.
const examplesDir = "../docs/events"

var (
	digestPattern      = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	fingerprintPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// exampleFiles maps the short name of each example file to its path.
func exampleFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(examplesDir, "*.json"))
	require.NoError(t, err)
	files := make(map[string]string, len(paths))
	for _, p := range paths {
		files[strings.TrimSuffix(filepath.Base(p), ".json")] = p
	}
	return files
}

func TestExamplesCoverEveryType(t *testing.T) {
	files := exampleFiles(t)
	var want []string
	for _, typ := range events.AllTypes {
		want = append(want, typ.Short())
	}
	slices.Sort(want)
	require.Len(t, slices.Compact(slices.Clone(want)), len(events.AllTypes), "short names are unique")
	var got []string
	for name := range files {
		got = append(got, name)
	}
	slices.Sort(got)
	assert.Equal(t, want, got, "exactly one example per event type in %s", examplesDir)
}

// decodeExample decodes a structured-mode example as the gate would read it
// off NATS, and returns its data.
func decodeExample(t *testing.T, path string) any {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	h := nats.Header{}
	h.Set(events.HeaderContentType, events.ContentTypeStructured)
	ev, err := events.Decode(h, raw)
	require.NoError(t, err)
	data, err := events.DecodeData(ev)
	require.NoError(t, err)
	return data
}

func TestExamples(t *testing.T) {
	byShort := map[string]events.Type{}
	for _, typ := range events.AllTypes {
		byShort[typ.Short()] = typ
	}
	for name, path := range exampleFiles(t) {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			h := nats.Header{}
			h.Set(events.HeaderContentType, events.ContentTypeStructured)
			ev, err := events.Decode(h, raw)
			require.NoError(t, err)
			assert.Equal(t, "1.0", ev.SpecVersion())
			assert.Equal(t, name, events.Type(ev.Type()).Short(), "file name matches the type")
			require.Equal(t, byShort[name], events.Type(ev.Type()))
			assert.Equal(t, events.ContentTypeJSON, ev.DataContentType())
			assert.False(t, ev.Time().IsZero(), "time")
			assert.True(t, strings.HasPrefix(ev.Source(), "airlock/"), "source %q", ev.Source())
			assert.NotEmpty(t, ev.ID())

			data, err := events.DecodeData(ev)
			require.NoError(t, err)

			// Every field of the example is a field of the Go struct.
			strict := json.NewDecoder(bytes.NewReader(ev.Data()))
			strict.DisallowUnknownFields()
			require.NoError(t, strict.Decode(events.NewPayload(events.Type(ev.Type()))), "data has fields the struct lacks")

			checkFormats(t, ev.Data())

			hdr, isOp := events.IsOpEvent(data)
			switch d := data.(type) {
			case *events.Request:
				assert.False(t, isOp)
				require.NoError(t, d.Validate())
				assert.Equal(t, events.OpID(d.Fingerprint()), ev.Subject(), "subject is the op id")
				assert.Equal(t, d.FingerprintHex(), ev.ID(), "id is the fingerprint, as the client sends it")
			case *events.Rejected:
				assert.False(t, isOp)
				assert.Empty(t, ev.Subject())
				assert.Contains(t, events.AllCodes, d.Code)
				assert.NotEmpty(t, d.Message)
				assert.True(t, strings.HasPrefix(d.Subject, events.SubjectRoot+".req."), d.Subject)
				assert.Positive(t, d.Size)
				assert.Positive(t, d.RequestSeq)
			case *events.ModeSet:
				assert.False(t, isOp)
				assert.Equal(t, d.Workspace, ev.Subject(), "subject is the workspace")
				assert.NotEmpty(t, d.Actor)
				assert.NotEmpty(t, d.Reason)
			case *events.PolicyLoaded:
				assert.False(t, isOp)
				assert.Empty(t, ev.Subject())
				assert.NotEmpty(t, d.Source)
			default:
				require.True(t, isOp, "%T is an op event", data)
				assert.NotEmpty(t, hdr.OpID)
				assert.NotEmpty(t, hdr.Workspace)
				assert.True(t, events.ValidOpID(hdr.OpID), "op_id %q", hdr.OpID)
				assert.True(t, events.ValidName(hdr.Workspace), "workspace %q", hdr.Workspace)
				assert.Equal(t, hdr.OpID, ev.Subject(), "subject is the op id")
			}

			switch d := data.(type) {
			case *events.Decided:
				require.NotNil(t, d.Request, "the example shows a first event")
			case *events.Held:
				require.NotNil(t, d.Request, "the example shows a first event")
				assert.Equal(t, d.Request.ArgsDigest, d.ArgsDigest)
				assert.True(t, d.ExpiresAt.After(ev.Time()))
				assert.Equal(t, events.HoldID(d.OpID), d.HoldID)
			case *events.Denied:
				require.NotNil(t, d.Request, "the example shows a first event")
				assert.Contains(t, events.AllCodes, d.Code)
			case *events.Claimed:
				assert.NotEmpty(t, d.Attempt)
				assert.NotEmpty(t, d.Executor)
				assert.True(t, events.ValidInstance(d.Instance), "instance %q", d.Instance)
			case *events.Started:
				assert.NotEmpty(t, d.Attempt)
			case *events.Completed:
				assert.NotEmpty(t, d.Attempt)
				assert.Positive(t, d.ResultBytes, "result_bytes is the size of the result, at least 4 (null)")
				var raw map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(ev.Data(), &raw))
				assert.NotContains(t, raw, "result", "a completed event never carries the result")
			case *events.Failed:
				assert.Contains(t, events.AllCodes, d.Code)
			case *events.Ambiguous:
				assert.Equal(t, events.CodeAmbiguous, d.Code)
				assert.NotEmpty(t, d.Known)
			}
		})
	}
}

// checkFormats walks an example's data: every op id, workspace, digest and
// fingerprint has the form the code produces.
func checkFormats(t *testing.T, data []byte) {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(data, &v))
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, child := range x {
				walk(path+"."+k, child)
			}
		case []any:
			for _, child := range x {
				walk(path+"[]", child)
			}
		case string:
			key := path[strings.LastIndex(path, ".")+1:]
			switch {
			case key == "op_id":
				assert.True(t, events.ValidOpID(x), "%s %q", path, x)
			case key == "workspace", key == "agent", key == "tool":
				if !strings.HasPrefix(path, ".args") {
					assert.True(t, events.ValidName(x), "%s %q", path, x)
				}
			case key == "hold_id":
				_, ok := events.OpOfHold(x)
				assert.True(t, ok, "%s %q", path, x)
			case strings.HasSuffix(key, "digest"), strings.HasSuffix(key, "hash"):
				assert.Regexp(t, digestPattern, x, path)
			case key == "fingerprint":
				assert.Regexp(t, fingerprintPattern, x, path)
			case key == "code":
				assert.Contains(t, events.AllCodes, events.Code(x), path)
			}
		}
	}
	walk("", v)
}

// The op examples tell one story: decided and its follow-ups are the op of
// the requested example.
func TestExamplesAgree(t *testing.T) {
	files := exampleFiles(t)
	req := decodeExample(t, files["requested"]).(*events.Request)
	require.NoError(t, req.Validate())
	opID := events.OpID(req.Fingerprint())

	dec := decodeExample(t, files["decided"]).(*events.Decided)
	assert.Equal(t, opID, dec.OpID)
	assert.Equal(t, req.Workspace, dec.Workspace)
	require.NotNil(t, dec.Request)
	assert.Equal(t, req.FingerprintHex(), dec.Request.Fingerprint)
	assert.Equal(t, events.ArgsDigest(req.Args), dec.Request.ArgsDigest)
	assert.Equal(t, req.Agent, dec.Request.Agent)
	assert.Equal(t, req.Tool, dec.Request.Tool)
	assert.Equal(t, req.IdempotencyKey, dec.Request.IdempotencyKey)

	// decided -> started (which claims the op) -> completed folds, as do
	// the alternatives.
	for _, last := range []string{"completed", "failed", "ambiguous"} {
		t.Run(last, func(t *testing.T) {
			op := &events.Op{}
			for i, name := range []string{"decided", "started", last, "scrubbed"} {
				require.NoError(t, op.Apply(decodeExample(t, files[name]), uint64(i+1), t0), name)
			}
			assert.Equal(t, opID, op.ID)
			assert.Equal(t, events.State(last), op.State)
			assert.True(t, op.Scrubbed)
		})
	}
	// A claimed event, as earlier versions wrote before the started
	// event, folds from decided too.
	t.Run("claimed", func(t *testing.T) {
		op := &events.Op{}
		require.NoError(t, op.Apply(decodeExample(t, files["decided"]), 1, t0))
		require.NoError(t, op.Apply(decodeExample(t, files["claimed"]), 2, t0))
		assert.Equal(t, events.StateExecuting, op.State)
		assert.False(t, op.Started)
	})
	// held -> granted and held -> expired fold.
	for _, next := range []string{"granted", "expired"} {
		t.Run(next, func(t *testing.T) {
			op := &events.Op{}
			for i, name := range []string{"held", next} {
				require.NoError(t, op.Apply(decodeExample(t, files[name]), uint64(i+1), t0), name)
			}
			assert.Equal(t, events.State(next), op.State)
		})
	}
	op := &events.Op{}
	require.NoError(t, op.Apply(decodeExample(t, files["denied"]), 1, t0))
	assert.Equal(t, events.StateDenied, op.State)
}
