package events_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/events"
)

// The JSON Schemas of the events: one per type, named by its short name,
// and the envelope's.
const (
	schemaDir      = "../docs/events/schemas"
	schemaBase     = "https://airlock.dev/schemas/events/"
	envelopeSchema = "cloudevent"
	// schemaExamplesDir holds one example of each type, <short name>.json.
	schemaExamplesDir = "../docs/events"
)

// schemaSet is every schema in schemaDir, as a document and compiled, by
// file name without .schema.json.
type schemaSet struct {
	docs     map[string]map[string]any
	compiled map[string]*jsonschema.Schema
}

func loadSchemaSet(t *testing.T) *schemaSet {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(schemaDir, "*.schema.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	out := &schemaSet{docs: map[string]map[string]any{}, compiled: map[string]*jsonschema.Schema{}}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".schema.json")
		doc := readJSON(t, p)
		obj, ok := doc.(map[string]any)
		require.True(t, ok, "%s is an object", p)
		id, _ := obj["$id"].(string)
		require.Equal(t, schemaBase+name+".schema.json", id, "$id of %s", p)
		require.NoError(t, c.AddResource(id, doc), p)
		out.docs[name] = obj
	}
	for name := range out.docs {
		sch, err := c.Compile(schemaBase + name + ".schema.json")
		require.NoError(t, err, name)
		out.compiled[name] = sch
	}
	return out
}

// readJSON reads a JSON file as the validator takes it (numbers as
// json.Number).
func readJSON(t *testing.T, path string) any {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err, path)
	return doc
}

// example reads the example of the type short as a structured-mode
// document; each call returns a fresh copy to mutate.
func example(t *testing.T, short string) map[string]any {
	t.Helper()
	doc, ok := readJSON(t, filepath.Join(schemaExamplesDir, short+".json")).(map[string]any)
	require.True(t, ok)
	return doc
}

func TestSchemaPerType(t *testing.T) {
	schemas := loadSchemaSet(t)
	var want []string
	for _, typ := range events.AllTypes {
		want = append(want, typ.Short())
	}
	slices.Sort(want)
	var got []string
	for name := range schemas.docs {
		if name != envelopeSchema {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	assert.Equal(t, want, got, "exactly one schema per event type in %s, and none for another", schemaDir)
	require.Contains(t, schemas.docs, envelopeSchema)

	for name, doc := range schemas.docs {
		assert.Equal(t, "https://json-schema.org/draft/2020-12/schema", doc["$schema"], name)
		assert.NotEmpty(t, doc["title"], name)
		assert.NotEmpty(t, doc["description"], name)
	}
	for _, typ := range events.AllTypes {
		assert.Contains(t, schemas.docs[typ.Short()]["title"], string(typ), "the title names the type")
		_, err := os.Stat(filepath.Join(schemaExamplesDir, typ.Short()+".json"))
		assert.NoError(t, err, "an example of %s", typ)
	}

	// The envelope knows every type, and no other.
	props := schemas.docs[envelopeSchema]["properties"].(map[string]any)
	var types []string
	for _, v := range props["type"].(map[string]any)["enum"].([]any) {
		types = append(types, v.(string))
	}
	var all []string
	for _, typ := range events.AllTypes {
		all = append(all, string(typ))
	}
	assert.ElementsMatch(t, all, types)
}

// jsonFields lists the JSON fields of struct type rt, embedded structs'
// included, and which of them Go always writes (no omitempty).
func jsonFields(rt reflect.Type) (fields, always []string) {
	for f := range rt.Fields() {
		tag, hasTag := f.Tag.Lookup("json")
		if f.Anonymous && !hasTag {
			ef, ea := jsonFields(f.Type)
			fields, always = append(fields, ef...), append(always, ea...)
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields = append(fields, name)
		if !strings.Contains(opts, "omitempty") {
			always = append(always, name)
		}
	}
	return fields, always
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func strs(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// Each schema names exactly the fields of its Go struct, and requires
// every field Go always writes: a field added to a struct without its
// schema (or the other way round) fails here.
func TestSchemasMatchStructs(t *testing.T) {
	schemas := loadSchemaSet(t)
	check := func(t *testing.T, rt reflect.Type, obj map[string]any) {
		fields, always := jsonFields(rt)
		assert.ElementsMatch(t, fields, keys(obj["properties"].(map[string]any)), "properties of %s", rt)
		required := strs(obj["required"])
		for _, f := range always {
			assert.Contains(t, required, f, "%s always writes %s", rt, f)
		}
		for _, r := range required {
			assert.Contains(t, fields, r, "%s has no field %s", rt, r)
		}
		assert.Equal(t, false, obj["additionalProperties"], "%s: no other fields", rt)
	}
	for _, typ := range events.AllTypes {
		t.Run(typ.Short(), func(t *testing.T) {
			check(t, reflect.TypeOf(events.NewPayload(typ)).Elem(), schemas.docs[typ.Short()])
		})
	}
	for _, short := range []string{"decided", "held", "denied"} {
		t.Run(short+"/summary", func(t *testing.T) {
			check(t, reflect.TypeFor[events.Summary](), schemas.docs[short]["$defs"].(map[string]any)["summary"].(map[string]any))
		})
	}
	t.Run("started/claim", func(t *testing.T) {
		check(t, reflect.TypeFor[events.Claim](), schemas.docs["started"]["$defs"].(map[string]any)["claim"].(map[string]any))
	})
}

// Every example fits its schemas, and the Go decoder accepts it.
func TestExamplesFitSchemas(t *testing.T) {
	schemas := loadSchemaSet(t)
	for _, typ := range events.AllTypes {
		t.Run(typ.Short(), func(t *testing.T) {
			path := filepath.Join(schemaExamplesDir, typ.Short()+".json")
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			h := nats.Header{}
			h.Set(events.HeaderContentType, events.ContentTypeStructured)
			ev, err := events.Decode(h, raw)
			require.NoError(t, err)
			require.Equal(t, typ, events.Type(ev.Type()))
			_, err = events.DecodeData(ev)
			require.NoError(t, err)

			doc := example(t, typ.Short())
			assert.NoError(t, schemas.compiled[typ.Short()].Validate(doc["data"]), "data")
			assert.NoError(t, schemas.compiled[envelopeSchema].Validate(doc), "envelope")
		})
	}
}

// at walks doc along the dotted path to the object holding its last key.
func at(t *testing.T, doc map[string]any, path string) (map[string]any, string) {
	t.Helper()
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := doc[p].(map[string]any)
		require.True(t, ok, "%s: no object %s", path, p)
		doc = next
	}
	return doc, parts[len(parts)-1]
}

// put sets the value at a path; del removes it.
func put(v any) func(*testing.T, map[string]any, string) {
	return func(t *testing.T, doc map[string]any, path string) {
		t.Helper()
		obj, key := at(t, doc, path)
		obj[key] = v
	}
}

func del(t *testing.T, doc map[string]any, path string) {
	t.Helper()
	obj, key := at(t, doc, path)
	require.Contains(t, obj, key, path)
	delete(obj, key)
}

// edit is one change to an example: path is dotted from the envelope.
type edit struct {
	path string
	do   func(*testing.T, map[string]any, string)
}

// Dropping any required field, or adding one the type does not have, is
// refused for every type.
func TestSchemasRefuseMissingAndExtraFields(t *testing.T) {
	schemas := loadSchemaSet(t)
	for _, typ := range events.AllTypes {
		short := typ.Short()
		sch := schemas.compiled[short]
		required := strs(schemas.docs[short]["required"])
		require.NotEmpty(t, required)
		for _, field := range required {
			t.Run(short+"/without "+field, func(t *testing.T) {
				doc := example(t, short)
				del(t, doc, "data."+field)
				assert.Error(t, sch.Validate(doc["data"]))
				assert.Error(t, schemas.compiled[envelopeSchema].Validate(doc))
			})
		}
		t.Run(short+"/with an unknown field", func(t *testing.T) {
			doc := example(t, short)
			doc["data"].(map[string]any)["unknown_field"] = "x"
			assert.Error(t, sch.Validate(doc["data"]))
			assert.Error(t, schemas.compiled[envelopeSchema].Validate(doc))
		})
	}
}

// Bad values are refused and the variants Airlock writes are accepted,
// type by type, and for the envelope.
func TestSchemasRefuseBadValues(t *testing.T) {
	schemas := loadSchemaSet(t)
	const (
		nkey    = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
		digest  = "sha256:0709d8802bf5e86281320c425269718fcfa7a866f263e7bf02b26d74173ab0a3"
		deniedH = "hold_d034c7232cca08f69185be6f044e05fa"
	)
	cases := []struct {
		name    string
		example string
		edits   []edit
		ok      bool
	}{
		{"requested: workspace not a name", "requested", []edit{{"data.workspace", put("Acme")}}, false},
		{"requested: idempotency key with a space", "requested", []edit{{"data.idempotency_key", put("ticket 4711")}}, false},
		{"requested: idempotency key over 256 bytes", "requested", []edit{{"data.idempotency_key", put(strings.Repeat("k", 257))}}, false},
		{"requested: args null, no key, no subject, another source", "requested", []edit{
			{"data.args", put(nil)}, {"data.idempotency_key", del}, {"subject", del}, {"source", put("my-agent")},
			{"datacontenttype", put("application/json; charset=utf-8")},
		}, true},
		{"requested: args an array", "requested", []edit{{"data.args", put([]any{1, "x"})}}, true},

		{"rejected: an op code", "rejected", []edit{{"data.code", put("CAPABILITY_DENIED")}}, false},
		{"rejected: not a request subject", "rejected", []edit{{"data.subject", put("airlock.v1.op.acme")}}, false},
		{"rejected: upper-case digest", "rejected", []edit{{"data.digest", put(strings.ToUpper(digest))}}, false},
		{"rejected: negative size", "rejected", []edit{{"data.size", put(-1)}}, false},
		{"rejected: sequence 0", "rejected", []edit{{"data.request_seq", put(0)}}, false},
		{"rejected: empty body, no ce-id", "rejected", []edit{{"data.size", put(0)}, {"data.request_id", del}}, true},

		{"decided: short op id", "decided", []edit{{"data.op_id", put("op_f56d0a91")}}, false},
		{"decided: fingerprint not hex", "decided", []edit{{"data.request.fingerprint", put(strings.Repeat("g", 64))}}, false},
		{"decided: a summary carrying the args", "decided", []edit{{"data.request.args", put(map[string]any{})}}, false},
		{"decided: unknown class", "decided", []edit{{"data.request.class", put("admin")}}, false},
		{"decided: unknown mode", "decided", []edit{{"data.mode", put("yolo")}}, false},
		{"decided: operands keyed by path", "decided", []edit{{"data.request.operands", put(map[string]any{"src/main.go": "absent"})}}, false},
		{"decided: operand hash neither digest nor absent", "decided", []edit{{"data.request.operands", put(map[string]any{digest: "missing"})}}, false},
		{"decided: rule, mode and operands", "decided", []edit{
			{"data.rule", put("allow-mail")}, {"data.mode", put("auto")},
			{"data.request.operands", put(map[string]any{digest: "absent", strings.Replace(digest, "07", "08", 1): digest})},
		}, true},

		{"held: expiry not a time", "held", []edit{{"data.expires_at", put("tomorrow")}}, false},
		{"held: expiry not in UTC", "held", []edit{{"data.expires_at", put("2025-06-04T16:07:11+02:00")}}, false},
		{"held: expiry below the millisecond", "held", []edit{{"data.expires_at", put("2025-06-04T14:07:11.0000001Z")}}, false},
		{"held: bad hold id", "held", []edit{{"data.hold_id", put("hold_xyz")}}, false},
		{"held: expiry to the millisecond", "held", []edit{{"data.expires_at", put("2025-06-04T14:07:11.123Z")}}, true},

		{"granted: blank reason", "granted", []edit{{"data.reason", put("  ")}}, false},
		{"granted: reason over 1024", "granted", []edit{{"data.reason", put(strings.Repeat("r", 1025))}}, false},
		{"granted: approver key not an nkey", "granted", []edit{{"data.approver_key", put("ABC")}}, false},
		{"granted: approver not a name", "granted", []edit{{"data.approver", put("alice@acme.example")}}, false},
		{"granted: with the approver's key", "granted", []edit{{"data.approver", put("alice")}, {"data.approver_key", put(nkey)}}, true},

		{"denied: not a denial code", "denied", []edit{{"data.code", put("EXECUTOR_FAILED")}}, false},
		{"denied: first event without the summary", "denied", []edit{{"data.request", del}}, false},
		{"denied: first event without the policy hash", "denied", []edit{{"data.policy_hash", del}}, false},
		{"denied: first event naming an actor", "denied", []edit{{"data.actor", put("alice")}}, false},
		{"denied: by the operand check", "denied", []edit{{"data.code", put("PATH_ESCAPE")}}, true},
		{"denied: by an approver", "denied", []edit{
			{"data.request", del}, {"data.policy_hash", del}, {"data.code", put("APPROVAL_DENIED")},
			{"data.actor", put("alice")}, {"data.actor_key", put(nkey)}, {"data.hold_id", put(deniedH)}, {"data.reason", put("no")},
		}, true},
		{"denied: by an approver, unnamed", "denied", []edit{
			{"data.request", del}, {"data.policy_hash", del}, {"data.code", put("APPROVAL_DENIED")},
			{"data.hold_id", put(deniedH)}, {"data.reason", put("no")},
		}, false},
		{"denied: by an approver, with the summary", "denied", []edit{
			{"data.policy_hash", del}, {"data.code", put("APPROVAL_DENIED")},
			{"data.actor", put("alice")}, {"data.hold_id", put(deniedH)}, {"data.reason", put("no")},
		}, false},
		{"denied: on resume", "denied", []edit{
			{"data.request", del}, {"data.code", put("RESUME_DENIED")}, {"data.hold_id", put(deniedH)},
			{"data.reason", put("WORKSPACE_LOCKED: agent a in workspace acme is in mode locked")}, {"data.mode", put("locked")},
		}, true},
		{"denied: on resume, reason without the code", "denied", []edit{
			{"data.request", del}, {"data.code", put("RESUME_DENIED")}, {"data.hold_id", put(deniedH)},
		}, false},

		{"expired: an op id for a hold id", "expired", []edit{{"data.hold_id", put("op_982c9d3edaed064085088f3da6135ab8")}}, false},

		{"claimed: attempt not a NUID", "claimed", []edit{{"data.attempt", put("a1")}}, false},
		{"claimed: delivery 0", "claimed", []edit{{"data.delivery", put(0)}}, false},
		{"claimed: consumer with a dot", "claimed", []edit{{"data.consumer", put("airlock.exec-send_email")}}, false},
		{"claimed: instance not 16 hex digits", "claimed", []edit{{"data.instance", put("3F9A0C2E5B7D1E44")}}, false},
		{"claimed: empty host", "claimed", []edit{{"data.host", put("")}}, false},
		{"started: attempt not a NUID", "started", []edit{{"data.attempt", put("a1")}}, false},
		{"started: evidence a string", "started", []edit{{"data.evidence", put("files")}}, false},
		{"started: evidence of a patch", "started", []edit{{"data.evidence", put(map[string]any{"files": []any{}})}}, true},
		{"ambiguous: instance of another shape", "ambiguous", []edit{{"data.instance", put("inst-1")}}, false},
		{"claimed: a recovery", "claimed", []edit{{"data.recovers", put("Hs5NwQ2aZr8TkL0vYc3mPb")}, {"data.runner", put("Zr2LkW7nBq5XtD0mFc4sHv")}}, true},

		{"completed: carrying the result", "completed", []edit{{"data.result", put(map[string]any{"sent": true})}}, false},
		{"completed: no result bytes", "completed", []edit{{"data.result_bytes", put(0)}}, false},
		{"completed: result over 512 KiB", "completed", []edit{{"data.result_bytes", put(events.MaxResultBytes + 1)}}, false},
		{"completed: recovered false", "completed", []edit{{"data.recovered", put(false)}}, false},
		{"completed: negative duration", "completed", []edit{{"data.duration_ms", put(-1)}}, false},
		{"completed: recovered, 1-byte result", "completed", []edit{{"data.recovered", put(true)}, {"data.result_bytes", put(1)}, {"data.duration_ms", put(0)}}, true},

		{"failed: the ambiguous code", "failed", []edit{{"data.code", put("EXECUTION_AMBIGUOUS")}}, false},
		{"failed: no attempt", "failed", []edit{{"data.attempt", del}}, false},
		{"failed: no attempt, request unavailable", "failed", []edit{{"data.attempt", del}, {"data.code", put("REQUEST_UNAVAILABLE")}}, true},
		{"failed: an executor's code", "failed", []edit{{"data.code", put("PATCH_CONFLICT")}}, true},

		{"ambiguous: another code", "ambiguous", []edit{{"data.code", put("EXECUTOR_FAILED")}}, false},

		{"scrubbed: sequence 0", "scrubbed", []edit{{"data.request_seq", put(0)}}, false},
		{"scrubbed: sequence beyond uint64", "scrubbed", []edit{{"data.request_seq", put(json.Number("18446744073709551616"))}}, false},
		{"result_erased: unknown reason", "result_erased", []edit{{"data.reason", put("bored")}}, false},
		{"result_erased: no digest", "result_erased", []edit{{"data.result_digest", del}}, false},
		{"completed: kept until not a time", "completed", []edit{{"data.result_kept_until", put("tomorrow")}}, false},
		{"decided: negative ttl", "decided", []edit{{"data.results", put(map[string]any{"ttl_s": -1})}}, false},

		{"set: unknown mode", "set", []edit{{"data.mode", put("off")}}, false},
		{"set: expiry not a time", "set", []edit{{"data.expires_at", put("18:20")}}, false},
		{"set: cleared, no expiry, no key", "set", []edit{{"data.mode", put("")}, {"data.expires_at", del}, {"data.actor_key", del}}, true},
		{"set: subject not the workspace form", "set", []edit{{"subject", put("Acme")}}, false},

		{"loaded: empty warnings", "loaded", []edit{{"data.warnings", put([]any{})}}, false},
		{"loaded: previous hash not a digest", "loaded", []edit{{"data.previous_hash", put("9f2c4e71")}}, false},
		{"loaded: built-in, warnings", "loaded", []edit{{"data.source", put("built-in")}, {"data.previous_hash", del}, {"data.warnings", put([]any{"modes.x: ..."})}}, true},

		{"envelope: spec version 0.3", "decided", []edit{{"specversion", put("0.3")}}, false},
		{"envelope: unknown type", "decided", []edit{{"type", put("dev.airlock.tool.exploded.v1")}}, false},
		{"envelope: no id", "decided", []edit{{"id", del}}, false},
		{"envelope: op event without subject", "decided", []edit{{"subject", del}}, false},
		{"envelope: op event subject not an op id", "claimed", []edit{{"subject", put("acme")}}, false},
		{"envelope: rejection with a subject", "rejected", []edit{{"subject", put("op_f56d0a91cf3bcd7c5f0ec9f5084882aa")}}, false},
		{"envelope: data_base64 instead of data", "decided", []edit{{"data_base64", put("e30=")}, {"data", del}}, false},
		{"envelope: extension not lower-case", "decided", []edit{{"traceId", put("x")}}, false},
		{"envelope: Airlock event without time", "completed", []edit{{"time", del}}, false},
		{"envelope: Airlock event from elsewhere", "decided", []edit{{"source", put("forger")}}, false},
		{"envelope: Airlock event with another content type", "decided", []edit{{"datacontenttype", put("text/plain")}}, false},
		{"envelope: time not RFC 3339", "decided", []edit{{"time", put("2025-06-03 14:02:11")}}, false},
		{"envelope: data of another type", "decided", []edit{{"type", put(string(events.TypeHeld))}}, false},
		{"envelope: an extension", "decided", []edit{{"traceparent", put("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}, true},
		{"envelope: expirer", "expired", []edit{{"source", put("airlock/expirer")}}, true},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := example(t, tc.example)
			dataEdit := false
			for _, e := range tc.edits {
				e.do(t, doc, e.path)
				dataEdit = dataEdit || strings.HasPrefix(e.path, "data.")
			}
			envErr := schemas.compiled[envelopeSchema].Validate(doc)
			if tc.ok {
				assert.NoError(t, schemas.compiled[tc.example].Validate(doc["data"]), "data")
				assert.NoError(t, envErr, "envelope")
				return
			}
			assert.Error(t, envErr, "envelope")
			if dataEdit {
				assert.Error(t, schemas.compiled[tc.example].Validate(doc["data"]), "data")
			}
		})
		if !tc.ok {
			covered[tc.example] = true
		}
	}
	for _, typ := range events.AllTypes {
		assert.True(t, covered[typ.Short()], "a bad value of %s is refused", typ)
	}
}
