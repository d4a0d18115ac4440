package command

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The splitter of valid JSON finds the same fields as the decoder, or
// leaves the input to it: on any input the two never disagree.
func FuzzObjectFieldsAgree(f *testing.F) {
	for _, s := range []string{
		`{"argv":["ls"]}`, ` { "argv" : [ "sh" , "-c", "a\"b}]" ] , "timeout_ms" : 100 } `,
		`{"a":{"b":[1,{"c":"}"}]},"d":-1.5e3,"e":true,"f":null}`, `{}`, `[]`, `"x"`, `{"a":1,"a":2}`,
		`{"\u0061rgv":["x"]}`, `{"a\\":1}`, "{\"\xff\":1,\"\xfe\":2}", `{"argv":["x"]} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		got, ok := validObjectFields(b)
		want, err := decodeObjectFields(b)
		if !ok {
			if err == nil {
				t.Fatalf("%q: the splitter gave up on an object the decoder reads: %v", b, want)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: the splitter read %v, the decoder refused it: %v", b, got, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d fields, the decoder %d", b, len(got), len(want))
		}
		for i := range got {
			if got[i].name != want[i].name || !bytes.Equal(got[i].value, want[i].value) {
				t.Fatalf("%q: field %d is %q=%s, the decoder's %q=%s", b, i, got[i].name, got[i].value, want[i].name, want[i].value)
			}
		}
	})
}
