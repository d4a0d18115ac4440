package remote_test

import (
	"encoding/json"
	"testing"

	"github.com/airlock-dev/airlock/consumers/tools/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeReply(t *testing.T) {
	cases := []struct {
		name, in string
		result   string // want this result, or
		code     string // this error code, or
		bad      string // a decode error containing this
	}{
		{name: "result", in: `{"v":1,"result":[1,2]}`, result: `[1,2]`},
		{name: "null result", in: `{"v":1,"result":null}`, result: `null`},
		{name: "null error beside a result", in: `{"v":1,"result":3,"error":null}`, result: `3`},
		{name: "error", in: `{"v":1,"error":{"code":"NOPE","message":"m"}}`, code: "NOPE"},
		{name: "error beside a null result", in: `{"v":1,"result":null,"error":{"code":"NOPE"}}`, code: "NOPE"},
		{name: "unknown fields", in: `{"v":1,"result":1,"took_ms":5}`, result: `1`},
		{name: "not JSON", in: `hello`, bad: "not a JSON object"},
		{name: "array", in: `[1]`, bad: "not a JSON object"},
		{name: "null", in: `null`, bad: "not a JSON object"},
		{name: "no version", in: `{"result":1}`, bad: `no protocol version`},
		{name: "version 2", in: `{"v":2,"result":1}`, bad: "protocol version 2"},
		{name: "version a string", in: `{"v":"1","result":1}`, bad: "not an integer"},
		{name: "neither", in: `{"v":1}`, bad: "neither"},
		{name: "both", in: `{"v":1,"result":1,"error":{"code":"X"}}`, bad: "both"},
		{name: "error without code", in: `{"v":1,"error":{"message":"m"}}`, bad: `"code"`},
		{name: "error a string", in: `{"v":1,"error":"boom"}`, bad: `"error" is not`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := remote.DecodeReply([]byte(tc.in))
			if tc.bad != "" {
				assert.ErrorContains(t, err, tc.bad)
				return
			}
			require.NoError(t, err)
			if tc.code != "" {
				require.NotNil(t, rep.Error)
				assert.Equal(t, tc.code, rep.Error.Code)
				assert.Nil(t, rep.Result)
				return
			}
			assert.Nil(t, rep.Error)
			assert.JSONEq(t, tc.result, string(rep.Result))
		})
	}
}

func TestDecodeStatusReply(t *testing.T) {
	cases := []struct {
		name, in string
		state    remote.State
		bad      string
	}{
		{name: "done", in: `{"v":1,"state":"done","result":1}`, state: remote.StateDone},
		{name: "done with error", in: `{"v":1,"state":"done","error":{"code":"X"}}`, state: remote.StateDone},
		{name: "running", in: `{"v":1,"state":"running"}`, state: remote.StateRunning},
		{name: "never", in: `{"v":1,"state":"never"}`, state: remote.StateNever},
		{name: "unknown", in: `{"v":1,"state":"unknown","result":"ignored"}`, state: remote.StateUnknown},
		{name: "refused", in: `{"v":1,"error":{"code":"INVALID_REQUEST"}}`, state: ""},
		{name: "done without outcome", in: `{"v":1,"state":"done"}`, bad: "neither"},
		{name: "other state", in: `{"v":1,"state":"pending"}`, bad: "unknown state"},
		{name: "no state", in: `{"v":1}`, bad: `no "state"`},
		{name: "result without state", in: `{"v":1,"result":1}`, bad: `no "state"`},
		{name: "state not a string", in: `{"v":1,"state":1}`, bad: "not a string"},
		{name: "version 0", in: `{"v":0,"state":"never"}`, bad: "protocol version 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := remote.DecodeStatusReply([]byte(tc.in))
			if tc.bad != "" {
				assert.ErrorContains(t, err, tc.bad)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.state, st.State)
			if tc.state == remote.StateUnknown {
				assert.Nil(t, st.Result)
			}
		})
	}
}

// What the decoders accept is a well-formed message: it encodes again and
// decodes to the same thing.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"result":{"a":[1,2]}}`, `{"v":1,"result":null}`, `{"v":1,"error":{"code":"X","message":"m"}}`,
		`{"v":2}`, `{"v":1,"result":1,"error":{"code":"X"}}`, `[]`, `null`, `{"v":1e0,"result":"é"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := remote.DecodeReply(data)
		if err != nil {
			return
		}
		if (rep.Result == nil) == (rep.Error == nil) {
			t.Fatalf("%q: want exactly one of result and error: %+v", data, rep)
		}
		body, err := json.Marshal(rep)
		if err != nil {
			t.Fatalf("%q: encode: %v", data, err)
		}
		again, err := remote.DecodeReply(body)
		if err != nil {
			t.Fatalf("%q: re-decode %s: %v", data, body, err)
		}
		assert.Equal(t, rep.Error, again.Error)
	})
}

func FuzzDecodeStatusReply(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"state":"done","result":1}`, `{"v":1,"state":"never"}`, `{"v":1,"state":"running"}`,
		`{"v":1,"error":{"code":"X"}}`, `{"v":1,"state":"done"}`, `{"v":1,"state":null,"error":{"code":"X"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := remote.DecodeStatusReply(data)
		if err != nil {
			return
		}
		switch st.State {
		case remote.StateDone:
			if (st.Result == nil) == (st.Error == nil) {
				t.Fatalf("%q: done needs exactly one of result and error", data)
			}
		case remote.StateRunning, remote.StateNever, remote.StateUnknown:
		case "":
			if st.Error == nil {
				t.Fatalf("%q: no state and no error", data)
			}
		default:
			t.Fatalf("%q: state %q accepted", data, st.State)
		}
	})
}
