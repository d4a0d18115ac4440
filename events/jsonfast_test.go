package events

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hotRecords are the types jsonfast.go writes and reads.
func hotRecords() []any {
	return []any{new(Op), new(Decided), new(Started), new(Completed), new(Request), new(Reply)}
}

// stdJSON is what encoding/json writes for v with HTML escaping off.
func stdJSON(v any) ([]byte, error) { return marshalStd(v) }

// filler fills every field of a value at random: empty or not, strings
// that need escapes or are not UTF-8, times in other zones or out of
// range, raw JSON that is not valid.
type filler struct {
	r *rand.Rand
	// full fills every field with a value that is not empty, in plain
	// ASCII: what the fast paths must take.
	full bool
}

var (
	plainPieces = []string{"a", "op-1", "ws", "sha256:0f3a", "Z", "0", "x y", "/tmp/f", "~", "{}", "é", "日本"}
	oddPieces   = []string{"\"", "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "<&>", "\u2028", "\u2029", "\xff", "\xed\xa0\x80", "\ufffd", "\U0001F600"}
	zones       = []*time.Location{time.UTC, time.FixedZone("", 3600), time.FixedZone("x", -5*3600-1800), time.Local}
)

func (f filler) str() string {
	if !f.full && f.r.IntN(4) == 0 {
		return ""
	}
	var b strings.Builder
	for range 1 + f.r.IntN(4) {
		if !f.full && f.r.IntN(3) == 0 {
			b.WriteString(oddPieces[f.r.IntN(len(oddPieces))])
		} else {
			b.WriteString(plainPieces[f.r.IntN(2+f.r.IntN(len(plainPieces)-2))])
		}
	}
	return b.String()
}

func (f filler) time() time.Time {
	if !f.full && f.r.IntN(50) == 0 {
		return time.Date(10000+f.r.IntN(10), 1, 1, 0, 0, 0, 0, time.UTC) // refused
	}
	t := time.Unix(f.r.Int64N(4e9), 0)
	switch f.r.IntN(3) {
	case 0:
		t = t.Add(time.Duration(f.r.IntN(1e9)))
	case 1:
		t = t.Add(time.Duration(f.r.IntN(1000)) * time.Millisecond)
	}
	return t.In(zones[f.r.IntN(len(zones))])
}

func (f filler) raw() json.RawMessage {
	if f.full {
		return json.RawMessage(`{"files":{"k":["a","b"]},"n":1}`)
	}
	return [...]json.RawMessage{nil, {}, json.RawMessage(`{"a":1}`), json.RawMessage(`{ "a" : [1, 2, {"b":"\u00e9\n"}] }`),
		json.RawMessage(`[]`), json.RawMessage(`{"a":}`), json.RawMessage(`{"s":"}"}`)}[f.r.IntN(7)]
}

func (f filler) fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(f.time()))
			return
		}
		for i := range v.NumField() {
			f.fill(v.Field(i))
		}
	case reflect.Pointer:
		if !f.full && f.r.IntN(3) == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.String:
		v.SetString(f.str())
	case reflect.Bool:
		v.SetBool(f.full || f.r.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		n := []int64{0, 1, -1, 42, 1 << 40, -1 << 50, 999_999_999_999_999_999, -999_999_999_999_999_999}[f.r.IntN(8)]
		if f.full && n == 0 {
			n = 7
		}
		v.SetInt(n)
	case reflect.Uint64:
		n := []uint64{0, 1, 42, 1 << 40, 999_999_999_999_999_999, 1<<64 - 1}[f.r.IntN(6)]
		if f.full && n == 0 {
			n = 7
		}
		v.SetUint(n)
	case reflect.Map:
		if !f.full && f.r.IntN(3) == 0 {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range f.r.IntN(5) + map[bool]int{true: 1}[f.full] {
			m.SetMapIndex(reflect.ValueOf(f.str()), reflect.ValueOf(f.str()))
		}
		v.Set(m)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[[]byte]() {
			if f.full || f.r.IntN(2) == 0 {
				v.SetBytes([]byte(f.str() + "x"))
			}
			return
		}
		if v.Type() != reflect.TypeFor[json.RawMessage]() {
			panic("no filler for " + v.Type().String())
		}
		v.Set(reflect.ValueOf(f.raw()))
	default:
		panic("no filler for " + v.Type().String())
	}
}

// TestFastJSONMatchesEncodingJSON holds the hot records' writers and
// readers to encoding/json on random values of every field.
func TestFastJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, proto := range hotRecords() {
		typ := reflect.TypeOf(proto).Elem()
		t.Run(typ.Name(), func(t *testing.T) {
			fastWrites, fastReads := 0, 0
			for i := range 3000 {
				v := reflect.New(typ)
				f := filler{r: r, full: i%10 == 0}
				f.fill(v.Elem())
				if p, ok := v.Interface().(*Reply); ok && f.full {
					p.Hold, p.Mode = nil, nil // a reply with either is left to encoding/json
				}
				want, wantErr := stdJSON(v.Interface())
				got, gotErr := MarshalJSON(v.Interface())
				if wantErr != nil {
					require.Error(t, gotErr, "encoding/json refuses %#v", v.Interface())
					continue
				}
				require.NoError(t, gotErr)
				require.Equal(t, string(want), string(got), "value %d", i)
				if _, ok := appendFast(nil, v.Interface()); ok {
					fastWrites++
				}

				wantV, gotV := reflect.New(typ), reflect.New(typ)
				require.NoError(t, json.Unmarshal(want, wantV.Interface()))
				require.NoError(t, UnmarshalJSON(want, gotV.Interface()))
				require.Equal(t, wantV.Interface(), gotV.Interface(), "read back %s", want)
				if decodeFast(want, reflect.New(typ).Interface()) {
					fastReads++
				}
				if f.full {
					// Every field is written: a field the fast writer
					// does not know fails the comparison above.
					require.True(t, decodeFast(want, reflect.New(typ).Interface()), "a plain record is read without encoding/json: %s", want)
					for _, tag := range jsonTags(typ) {
						if typ == reflect.TypeFor[Reply]() && (tag == "hold" || tag == "mode") {
							continue
						}
						require.Contains(t, string(want), `"`+tag+`":`)
					}
				}
			}
			t.Logf("%s: %d of 3000 written and %d read on the fast path", typ.Name(), fastWrites, fastReads)
			require.GreaterOrEqual(t, fastReads, 300, "every plain record, at least")
		})
	}
}

// jsonTags lists the JSON names of typ's fields, those of embedded
// structs included.
func jsonTags(typ reflect.Type) []string {
	var tags []string
	for i := range typ.NumField() {
		sf := typ.Field(i)
		if sf.Anonymous {
			tags = append(tags, jsonTags(sf.Type)...)
			continue
		}
		tags = append(tags, strings.Split(sf.Tag.Get("json"), ",")[0])
	}
	return tags
}

// fastReadSeeds are inputs the fast readers must read as json.Unmarshal
// does, or leave to it.
var fastReadSeeds = []string{
	`{"op_id":"o","workspace":"w","attempt":"a","result_digest":"d","result_bytes":3,"duration_ms":-4}`,
	` { "op_id" : "o" , "workspace":"w" } `,
	`{"op_id":"o","op_id":"p"}`,
	`{"OP_ID":"o"}`,
	`{"op_id":null}`,
	`{"op_id":"\u00e9"}`,
	`{"op_id":"o\\"}`,
	`{"result_bytes":1e3}`,
	`{"result_bytes":1.0}`,
	`{"result_bytes":01}`,
	`{"result_bytes":-0}`,
	`{"result_bytes":99999999999999999999}`,
	`{"duration_ms":-9223372036854775808}`,
	`{"recovered":true}x`,
	`{"recovered":truex}`,
	`{"recovered":tru}`,
	`{"result_kept_until":"2026-12-04T10:00:00.5+01:00"}`,
	`{"result_kept_until":"2026-12-04 10:00:00"}`,
	`{"result_kept_until":null}`,
	`{"request":{"operands":{"a":"1","a":"2"}},"results":{"ttl_s":60,"erase_on_delivery":true}}`,
	`{"request":{"agent":"a"},"request":{"tool":"t"}}`,
	`{"request":{"operands":{}}}`,
	`{"request":{"operands":{"k":"\n"}}}`,
	`{"evidence":{"a":[1,{"b":"]}"}]},"claim":{"executor":"x","work_seq":5}}`,
	`{"evidence":{"a":}}`,
	`{"evidence":"s"}`,
	`{"evidence":{"a":"\"}"}}`,
	`{"state":"completed","version":3,"first_seq":1,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05.123456789Z","operands":{"b":"2","a":"1"}}`,
	`{"op_id":"` + "\xff" + `"}`,
	`{"op_id":"` + "\x01" + `"}`,
	`{"workspace":"w","agent":"a","tool":"t","args":{"x":1},"idempotency_key":"k"}`,
	`{"workspace":"w","args":null}`,
	`{"workspace":"w","args":"s"}`,
	`{"workspace":"w","args":[1,"]"]}`,
	`{"op_id":"o","state":"completed","result":{"n":1},"sealed_result":"YWI=","result_bytes":7}`,
	`{"sealed_result":"!!"}`,
	`{"sealed_result":""}`,
	`{"sealed_result":"YWI"}`,
	`{"result":null}`,
	`{"hold":{"hold_id":"h"}}`,
	`{"unknown":1}`,
	`{}`,
	`{`,
	`{"op_id":"o",}`,
	`[]`,
	`null`,
	``,
}

// FuzzFastRead holds the fast readers to json.Unmarshal: what they take
// they read as it does, and they take nothing it refuses.
func FuzzFastRead(f *testing.F) {
	for _, s := range fastReadSeeds {
		f.Add([]byte(s))
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, proto := range hotRecords() {
		v := reflect.New(reflect.TypeOf(proto).Elem())
		filler{r: r, full: true}.fill(v.Elem())
		b, err := stdJSON(v.Interface())
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, proto := range hotRecords() {
			typ := reflect.TypeOf(proto).Elem()
			got := reflect.New(typ)
			if !decodeFast(data, got.Interface()) {
				continue
			}
			want := reflect.New(typ)
			require.NoError(t, json.Unmarshal(data, want.Interface()), "taken by the fast %s reader: %q", typ.Name(), data)
			require.Equal(t, want.Interface(), got.Interface(), "%s from %q", typ.Name(), data)
		}
	})
}

// TestFastReadFallsBack reads inputs the fast readers leave to
// encoding/json through UnmarshalJSON: the same value, or the same error.
func TestFastReadFallsBack(t *testing.T) {
	for _, s := range fastReadSeeds {
		for _, proto := range hotRecords() {
			typ := reflect.TypeOf(proto).Elem()
			want, got := reflect.New(typ), reflect.New(typ)
			wantErr := json.Unmarshal([]byte(s), want.Interface())
			gotErr := UnmarshalJSON([]byte(s), got.Interface())
			name := fmt.Sprintf("%s from %q", typ.Name(), s)
			if wantErr != nil {
				require.EqualError(t, gotErr, wantErr.Error(), name)
				continue
			}
			require.NoError(t, gotErr, name)
			require.Equal(t, want.Interface(), got.Interface(), name)
		}
	}
}

// FuzzValidName holds ValidName to the pattern it documents.
func FuzzValidName(f *testing.F) {
	pattern := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	for _, s := range []string{"", "a", "0", "_a", "-a", "a_", "a-", "A", "a.b", "a b", "a\n", "é", strings.Repeat("a", 64), strings.Repeat("a", 65), "ws-1_x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		require.Equal(t, pattern.MatchString(s), ValidName(s), "%q", s)
	})
}
