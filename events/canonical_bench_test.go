package events

import "testing"

func BenchmarkCanonicalSmall(b *testing.B) {
	in := []byte(`{"text": "hello from the benchmark", "n": 12345, "nested": {"b": [1, 2.5, true, null], "a": "x\u00e9"}}`)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := Canonical(in); err != nil {
			b.Fatal(err)
		}
	}
}
