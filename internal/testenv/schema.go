package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/streams"
)

// SchemasDir is where the JSON Schemas of the events are, relative to the
// module root: one <short name>.schema.json per type, and
// cloudevent.schema.json for the envelope.
const SchemasDir = "docs/events/schemas"

// schemaReadTimeout bounds the reading of both streams by one check.
const schemaReadTimeout = 10 * time.Second

// airlockSource starts the ce-source of every event Airlock writes.
const airlockSource = "airlock/"

// maxSchemaReports bounds the failures and skips one check reports.
const maxSchemaReports = 20

// eventSchemas are the compiled schemas: of the data, by type, and of the
// envelope. Compiled once per process; read-only afterwards.
type eventSchemas struct {
	data     map[events.Type]*jsonschema.Schema
	envelope *jsonschema.Schema
}

var (
	schemasOnce sync.Once
	schemas     *eventSchemas
	schemasErr  error
)

// loadSchemas compiles the schemas the first time it is called and
// returns them, or why they could not be compiled, every time.
func loadSchemas() (*eventSchemas, error) {
	schemasOnce.Do(func() {
		dir, err := schemasDir()
		if err == nil {
			schemas, err = compileSchemas(dir)
		}
		schemasErr = err
	})
	return schemas, schemasErr
}

// schemasDir finds SchemasDir from the working directory up: the first
// directory holding go.mod is the module root.
func schemasDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, SchemasDir), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("event schemas: no go.mod above the working directory")
		}
		dir = parent
	}
}

// compileSchemas compiles every schema in dir under its $id, so that the
// envelope's references to the data schemas resolve without a network.
func compileSchemas(dir string) (*eventSchemas, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.schema.json"))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	ids := map[string]string{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		obj, _ := doc.(map[string]any)
		id, _ := obj["$id"].(string)
		if id == "" {
			return nil, fmt.Errorf("%s: no $id", p)
		}
		if err := c.AddResource(id, doc); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		ids[strings.TrimSuffix(filepath.Base(p), ".schema.json")] = id
	}
	s := &eventSchemas{data: map[events.Type]*jsonschema.Schema{}}
	for _, t := range events.AllTypes {
		id, ok := ids[t.Short()]
		if !ok {
			return nil, fmt.Errorf("event schemas: no %s.schema.json in %s for %s", t.Short(), dir, t)
		}
		if s.data[t], err = c.Compile(id); err != nil {
			return nil, fmt.Errorf("event schemas: %s: %w", t.Short(), err)
		}
	}
	id, ok := ids["cloudevent"]
	if !ok {
		return nil, fmt.Errorf("event schemas: no cloudevent.schema.json in %s", dir)
	}
	if s.envelope, err = c.Compile(id); err != nil {
		return nil, fmt.Errorf("event schemas: cloudevent: %w", err)
	}
	return s, nil
}

// CheckEventSchemas reads every message stored in AIRLOCK_OPS and
// AIRLOCK_REQUESTS through js and checks each event against the JSON
// Schema of its ce-type (SchemasDir), and its attributes against the
// CloudEvent envelope's: it fails t with the stream, sequence, subject
// and validation error of each that does not fit. apptest.StartApp calls
// it before the app shuts down. js needs the right to create consumers on both
// streams (the service principal's context has it).
//
// Input a test plants on purpose is passed over, and listed in the log:
// in AIRLOCK_OPS, a message DecodeStored (what Airlock's own readers use)
// refuses, and an event whose ce-source is not Airlock's (airlock/...);
// in AIRLOCK_REQUESTS, one the gate would reject (Decode, another type
// than tool.requested, DecodeData, Request.Validate). Every other message
// is checked, and an Airlock event DecodeStored accepts and Decode refuses
// fails. Messages deleted while the streams are read (erased requests)
// are not seen, and messages appended after reading started are not
// checked. Reading is bounded by 10 seconds.
func CheckEventSchemas(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	s, err := loadSchemas()
	if err != nil {
		t.Errorf("event schemas: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), schemaReadTimeout)
	defer cancel()
	var failures, skips []string
	checked := map[string]int{}
	for _, stream := range []string{streams.Ops, streams.Requests} {
		read, held, err := readStream(ctx, js, stream, func(m jetstream.Msg) {
			md, err := m.Metadata()
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s on %s: metadata: %v", stream, m.Subject(), err))
				return
			}
			where := fmt.Sprintf("%s seq %d subject %s ce-type %q", stream, md.Sequence.Stream, m.Subject(), m.Headers().Get(events.HeaderPrefix+"type"))
			skip, err := s.check(stream, m.Headers(), m.Data())
			switch {
			case skip != "":
				skips = append(skips, where+": "+skip)
			case err != nil:
				failures = append(failures, where+": "+err.Error())
			default:
				checked[stream]++
			}
		})
		if err != nil {
			t.Errorf("event schemas: read %s: %v", stream, err)
		}
		// The ops stream denies deletes: every message it held is read.
		if stream == streams.Ops && err == nil && read != held {
			t.Errorf("event schemas: read %d of the %d messages %s held", read, held, stream)
		}
	}
	if len(skips) > 0 {
		t.Logf("event schemas: %d messages passed over as planted input:\n%s", len(skips), firstOf(skips))
	}
	if len(failures) > 0 {
		t.Errorf("event schemas: %d of the events the pipeline stored do not fit their schema (%s):\n%s",
			len(failures), SchemasDir, firstOf(failures))
	}
	t.Logf("event schemas: checked %d messages of %s and %d of %s", checked[streams.Ops], streams.Ops, checked[streams.Requests], streams.Requests)
}

// firstOf lists up to maxSchemaReports lines, and how many more there are.
func firstOf(lines []string) string {
	if len(lines) <= maxSchemaReports {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:maxSchemaReports], "\n") + fmt.Sprintf("\n... and %d more", len(lines)-maxSchemaReports)
}

// check says why a message is passed over (skip), or how it fails its
// schemas (err), or neither.
func (s *eventSchemas) check(stream string, h nats.Header, body []byte) (skip string, err error) {
	if stream == streams.Requests {
		ev, err := events.Decode(h, body)
		if err != nil {
			return "the gate rejects it: " + err.Error(), nil
		}
		if t := events.Type(ev.Type()); t != events.TypeRequested {
			return "the gate rejects it: not a request", nil
		}
		data, err := events.DecodeData(ev)
		if err != nil {
			return "the gate rejects it: " + err.Error(), nil
		}
		if err := data.(*events.Request).Validate(); err != nil {
			return "the gate rejects it: " + err.Error(), nil
		}
		return "", s.validate(ev.Type(), envelope(ev), ev.Data())
	}
	// What a test plants for the component that reads it to refuse comes
	// under a source of its own (or none); Airlock's own sources all
	// start with airlock/, and everything Airlock writes must decode and
	// fit its schema.
	src := h.Get(events.HeaderPrefix + "source")
	ev, err := events.Decode(h, body)
	if err == nil {
		src = ev.Source()
	}
	if !strings.HasPrefix(src, airlockSource) {
		return fmt.Sprintf("not written by Airlock: source %q", src), nil
	}
	if _, _, _, derr := events.DecodeStored(h, body); derr != nil {
		return "", fmt.Errorf("written by %s, and DecodeStored refuses it: %w", src, derr)
	}
	if err != nil {
		return "", fmt.Errorf("DecodeStored accepts it, Decode does not: %w", err)
	}
	return "", s.validate(ev.Type(), envelope(ev), ev.Data())
}

// envelope is the structured-mode form of an event's attributes, without
// its data.
func envelope(ev event.Event) map[string]any {
	env := map[string]any{"specversion": ev.SpecVersion(), "type": ev.Type(), "source": ev.Source(), "id": ev.ID()}
	for k, v := range ev.Extensions() {
		switch v.(type) {
		case string, bool, int32:
			env[k] = v
		default:
			env[k] = fmt.Sprint(v)
		}
	}
	if t := ev.Time(); !t.IsZero() {
		env["time"] = t.UTC().Format(time.RFC3339Nano)
	}
	for k, v := range map[string]string{"subject": ev.Subject(), "datacontenttype": ev.DataContentType(), "dataschema": ev.DataSchema()} {
		if v != "" {
			env[k] = v
		}
	}
	return env
}

// validate checks data against the schema of typ, then env with data in
// it against the envelope's.
func (s *eventSchemas) validate(typ string, env map[string]any, data []byte) error {
	sch, ok := s.data[events.Type(typ)]
	if !ok {
		return fmt.Errorf("no schema for type %q", typ)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("data is not JSON: %w", err)
	}
	if err := sch.Validate(doc); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	env["data"] = doc
	if err := s.envelope.Validate(env); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	return nil
}

// readStream calls f with every message stored in stream up to its last
// sequence when reading starts, through an ephemeral consumer that is
// deleted afterwards, and returns how many there were and how many the
// stream held when reading started.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, f func(jetstream.Msg)) (read, held uint64, err error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	last, held := info.State.LastSeq, info.State.Msgs
	if held == 0 {
		return 0, 0, nil
	}
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Description:       "testenv: event schema check",
	})
	if err != nil {
		return 0, held, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = st.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	for ctx.Err() == nil {
		// A wait, not FetchNoWait: a new consumer may have nothing ready
		// at the first pull. Nothing within it means the rest was
		// deleted (requests are erased as their ops end).
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			return read, held, err
		}
		n, done := 0, false
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err == nil && md.Sequence.Stream > last {
				done = true
				continue
			}
			n++
			f(m)
			if err == nil && md.Sequence.Stream == last {
				done = true
			}
		}
		read += uint64(n)
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return read, held, err
		}
		if n == 0 || done {
			return read, held, nil
		}
	}
	return read, held, ctx.Err()
}
