package policy_test

import (
	"testing"

	"github.com/airlock-dev/airlock/internal/policy"
)

// FuzzParse checks that Parse never panics, and that a policy it accepts
// round-trips through Spec to the same hash and decides every request.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sampleYAML))
	f.Add([]byte(sampleJSON))
	f.Add([]byte("tools: {echo: read}\nworkspaces: {dev: {mode: confirm}}\n"))
	f.Add([]byte("rules:\n  - {name: r, when: 'args.x > 1', action: deny}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data)
		if err != nil {
			if p != nil {
				t.Fatal("a policy and an error")
			}
			return
		}
		q, err := policy.New(p.Spec())
		if err != nil {
			t.Fatalf("spec of a parsed policy does not build: %v", err)
		}
		if q.Hash() != p.Hash() {
			t.Fatal("hash changed through Spec")
		}
		for _, tool := range append(p.Tools(), "unheard") {
			d := p.Decide(req("dev", "bot", tool, `{"argv":["rm"],"host":"x","n":1}`), "")
			if d.Reason == "" || d.Class == "" || d.Mode == "" || d.Hash != p.Hash() {
				t.Fatalf("incomplete decision %+v", d)
			}
		}
	})
}
