package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// rule is one compiled rule.
type rule struct {
	name   string
	action Outcome
	reason string
	prg    cel.Program
	// metered is set when the rule runs under RuleCostLimit.
	metered bool
}

var ruleNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// The CEL variables a rule sees.
const (
	varTool      = "tool"
	varClass     = "class"
	varArgs      = "args"
	varWorkspace = "workspace"
	varAgent     = "agent"
	varMode      = "mode"
)

// celEnv is the one environment every rule compiles in. It is immutable
// and safe for concurrent use, so it is built once, on first use.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable(varTool, cel.StringType),
		cel.Variable(varClass, cel.StringType),
		cel.Variable(varArgs, cel.DynType),
		cel.Variable(varWorkspace, cel.StringType),
		cel.Variable(varAgent, cel.StringType),
		cel.Variable(varMode, cel.StringType),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxRuleWhenBytes),
	)
})

// compileRules checks the limits of each rule and compiles its expression.
func compileRules(specs []RuleSpec) ([]rule, error) {
	if len(specs) > MaxRules {
		return nil, fmt.Errorf("rules: %d rules, limit %d", len(specs), MaxRules)
	}
	if len(specs) == 0 {
		return nil, nil
	}
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	seen := make(map[string]int, len(specs))
	out := make([]rule, 0, len(specs))
	for i, rs := range specs {
		if !ruleNamePattern.MatchString(rs.Name) {
			return nil, fmt.Errorf("rules[%d]: name %q must match %s", i, truncate(rs.Name, 80), namePatternText)
		}
		if j, dup := seen[rs.Name]; dup {
			return nil, fmt.Errorf("rule %q (rules[%d]): name already used by rules[%d]", rs.Name, i, j)
		}
		seen[rs.Name] = i
		r, err := compileRule(env, rs)
		if err != nil {
			return nil, fmt.Errorf("rule %q (rules[%d]): %w", rs.Name, i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func compileRule(env *cel.Env, rs RuleSpec) (rule, error) {
	r := rule{name: rs.Name, reason: rs.Reason}
	switch Outcome(rs.Action) {
	case Allow, Deny, Hold:
		r.action = Outcome(rs.Action)
	default:
		return r, fmt.Errorf("action %q must be allow, deny or hold", truncate(rs.Action, 80))
	}
	if len(rs.Reason) > MaxRuleReasonBytes {
		return r, fmt.Errorf("reason is %d bytes, limit %d", len(rs.Reason), MaxRuleReasonBytes)
	}
	if !utf8.ValidString(rs.When) || !utf8.ValidString(rs.Reason) {
		return r, errors.New("when and reason must be UTF-8 text")
	}
	if strings.TrimSpace(rs.When) == "" {
		return r, errors.New(`when is empty: write a CEL expression, such as tool == "exec"`)
	}
	if len(rs.When) > MaxRuleWhenBytes {
		return r, fmt.Errorf("when is %d bytes, limit %d", len(rs.When), MaxRuleWhenBytes)
	}
	ast, iss := env.Compile(rs.When)
	if iss.Err() != nil {
		// The first few errors, each at line:column in the expression.
		errs := iss.Errors()
		msgs := make([]string, 0, min(len(errs), 3)+1)
		for _, e := range errs[:min(len(errs), 3)] {
			msgs = append(msgs, fmt.Sprintf("%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		if len(errs) > 3 {
			msgs = append(msgs, fmt.Sprintf("and %d more errors", len(errs)-3))
		}
		return r, errors.New(strings.Join(msgs, "; "))
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		return r, fmt.Errorf("when must be a bool expression, not %s (compare it: args.dry_run == true)", t)
	}
	// A rule whose worst case, estimated now with every size of args
	// unknown (unbounded), fits within the limit cannot exceed it: it runs
	// without the cost tracker, which costs more than such a rule. Every
	// other rule is metered and stopped at the limit.
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if est, err := env.EstimateCost(ast, unknownSizes{}); err != nil || est.Max > RuleCostLimit {
		opts = append(opts, cel.CostLimit(RuleCostLimit))
		r.metered = true
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return r, fmt.Errorf("when: %w", err)
	}
	r.prg = prg
	return r, nil
}

// unknownSizes leaves every size and call cost to CEL's defaults, under
// which the size of anything read from args is unknown, so the estimate is
// an upper bound whatever the request holds.
type unknownSizes struct{}

func (unknownSizes) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }

func (unknownSizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

// eval reports whether the rule's expression is true for act.
func (r *rule) eval(act cel.Activation) (bool, error) {
	out, _, err := r.prg.Eval(act)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("result is %s, not bool", out.Type().TypeName())
	}
	return bool(b), nil
}

// activation holds the variables of one decision. Its values are CEL
// values already, so every rule reads them without converting again; args
// are decoded on first read, at most once per decision.
type activation struct {
	tool, class, workspace, agent, mode ref.Val
	rawArgs                             json.RawMessage
	args                                ref.Val
}

// ResolveName implements cel.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case varTool:
		return a.tool, true
	case varClass:
		return a.class, true
	case varArgs:
		if a.args == nil {
			a.args = decodeArgs(a.rawArgs)
		}
		return a.args, true
	case varWorkspace:
		return a.workspace, true
	case varAgent:
		return a.agent, true
	case varMode:
		return a.mode, true
	}
	return nil, false
}

// Parent implements cel.Activation.
func (a *activation) Parent() cel.Activation { return nil }

// Classes and modes as CEL values, converted once.
var (
	classVals = map[Class]ref.Val{
		ClassRead: types.String(ClassRead), ClassWrite: types.String(ClassWrite), ClassExec: types.String(ClassExec),
		ClassNetwork: types.String(ClassNetwork), ClassDestructive: types.String(ClassDestructive),
	}
	modeVals = map[Mode]ref.Val{
		ModeAuto: types.String(ModeAuto), ModeConfirm: types.String(ModeConfirm), ModeLocked: types.String(ModeLocked),
	}
)

func stringVal[K ~string](cache map[K]ref.Val, k K) ref.Val {
	if v, ok := cache[k]; ok {
		return v
	}
	return types.String(k)
}

// decodeArgs decodes a request's JSON args into CEL values: objects,
// arrays, strings, numbers (double), booleans and null. Args that are not
// JSON decode to an error value, so a rule that reads them fails to
// evaluate (and fails closed).
func decodeArgs(raw json.RawMessage) ref.Val {
	if len(bytes.TrimSpace(raw)) == 0 {
		return types.NullValue
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return types.NewErr("args are not JSON: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// truncate shortens s to at most n bytes and "...", cutting between
// characters so the result stays valid UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

var _ cel.Activation = (*activation)(nil)
