package policy_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
)

// benchRules is a realistic mix of n rules, none of which matches the
// benchmark's request; when lastMatches, a final rule that does is added
// in place of the last.
func benchRules(n int, lastMatches bool) []policy.RuleSpec {
	templates := []struct{ when, action string }{
		{`tool == "remote" && !(args.host in ["api.example.com", "files.example.com"])`, "deny"},
		{`tool == "exec" && type(args) == map && has(args.argv) && args.argv.exists(a, a == "rm%d")`, "hold"},
		{`workspace == "prod-%d" && class != "read"`, "hold"},
		{`agent == "intern-%d" && class in ["exec", "network"]`, "hold"},
		{`tool == "apply_patch" && has(args.lines) && args.lines > 1000.0 + %d.0`, "hold"},
		{`tool == "exec" && has(args.cwd) && args.cwd.startsWith("/etc/%d")`, "deny"},
		{`tool == "remote" && has(args.url) && args.url.matches("^http://internal-%d\\.")`, "deny"},
		{`mode == "confirm" && tool == "echo-%d"`, "allow"},
		{`class == "network" && has(args.method) && args.method in ["DELETE", "PUT"] && workspace == "ws-%d"`, "hold"},
		{`tool == "exec" && has(args.env) && has(args.env.SECRET_%d)`, "deny"},
	}
	out := make([]policy.RuleSpec, 0, n)
	for i := range n {
		tpl := templates[i%len(templates)]
		when := tpl.when
		if countVerbs(when) > 0 {
			when = fmt.Sprintf(when, i)
		}
		out = append(out, policy.RuleSpec{Name: fmt.Sprintf("rule-%02d", i), When: when, Action: tpl.action})
	}
	if lastMatches {
		out[n-1] = policy.RuleSpec{Name: "last", When: `tool == "exec" && args.argv[0] == "make"`, Action: "hold", Reason: "the last rule"}
	}
	return out
}

func countVerbs(s string) int {
	n := 0
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '%' && s[i+1] == 'd' {
			n++
		}
	}
	return n
}

func benchPolicy(b *testing.B, rules []policy.RuleSpec) *policy.Policy {
	b.Helper()
	p, err := policy.New(policy.Spec{
		Tools:      map[string]string{"echo": "read", "exec": "exec", "apply_patch": "write", "remote": "network"},
		Workspaces: map[string]policy.WorkspaceSpec{"dev": {Mode: "auto", Agents: map[string]string{"intern": "confirm"}}},
		Rules:      rules,
	})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

var benchReq = &events.Request{
	Workspace: "dev", Agent: "bot", Tool: "exec",
	Args: []byte(`{"argv":["make","-j8","test"],"cwd":"/home/bot/src","env":{"PATH":"/usr/bin"}}`),
}

func runDecide(b *testing.B, p *policy.Policy, want policy.Outcome) {
	b.Helper()
	if d := p.Decide(benchReq, ""); d.Outcome != want {
		b.Fatalf("outcome %s (%s), want %s", d.Outcome, d.Reason, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		p.Decide(benchReq, "")
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/decision")
}

// BenchmarkDecide50Rules decides with 50 compiled rules, all evaluated: none
// matches, or only the last does.
func BenchmarkDecide50Rules(b *testing.B) {
	b.Run("none-match", func(b *testing.B) {
		runDecide(b, benchPolicy(b, benchRules(50, false)), policy.Allow)
	})
	b.Run("last-matches", func(b *testing.B) {
		runDecide(b, benchPolicy(b, benchRules(50, true)), policy.Hold)
	})
}

// BenchmarkDecideNoRules decides on class and mode alone.
func BenchmarkDecideNoRules(b *testing.B) {
	runDecide(b, benchPolicy(b, nil), policy.Allow)
}

// BenchmarkDecideDefault decides with the built-in policy's one rule.
func BenchmarkDecideDefault(b *testing.B) {
	runDecide(b, policy.Default(), policy.Allow)
}

// BenchmarkNew50Rules builds a policy, compiling 50 rules.
func BenchmarkNew50Rules(b *testing.B) {
	spec := policy.Spec{Tools: map[string]string{"exec": "exec"}, Rules: benchRules(50, false)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := policy.New(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecideDefaultOtherTool is the default policy deciding a request
// for a tool other than exec: its one rule stops at `tool == "exec"`, so
// the pipeline's echo ops pay little for it.
func BenchmarkDecideDefaultOtherTool(b *testing.B) {
	req := &events.Request{Workspace: "bench", Agent: "bench", Tool: "echo", Args: json.RawMessage(`{"n":1,"text":"hello"}`)}
	p := policy.Default()
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(req, "")
	}
}
