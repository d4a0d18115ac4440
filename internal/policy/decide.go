package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"cel.dev/cel-go/common/types"

	"github.com/airlock-dev/airlock/events"
)

// Outcome is what a decision says.
type Outcome string

// Decision outcomes.
const (
	Allow Outcome = "allow"
	Deny  Outcome = "deny"
	Hold  Outcome = "hold"
)

// Decision is the verdict on one request.
type Decision struct {
	Outcome Outcome
	Class   Class
	// Mode is the mode the decision was made in.
	Mode Mode
	// Code is set when denied (and APPROVAL_REQUIRED when held).
	Code   events.Code
	Reason string
	// Rule names the rule that decided, or "".
	Rule string
	Hash string
}

// Decide rules on a validated request. override, when not empty, replaces
// the mode the policy gives the workspace and its agents (an operator's
// control); an override that is not a mode is locked.
//
// The order is: the effective mode; locked denies every class but read,
// whatever the rules say; the rules, first match wins; then destructive is
// denied, confirm holds every class but read, and the rest is allowed.
// Decide is safe for concurrent use.
func (p *Policy) Decide(r *events.Request, override Mode) Decision {
	if r == nil {
		return Decision{Outcome: Deny, Class: ClassDestructive, Mode: ModeLocked, Code: events.CodeInvalidEvent, Reason: "no request to decide on", Hash: p.hash}
	}
	class := p.Class(r.Tool)
	mode := p.Mode(r.Workspace, r.Agent)
	if override != "" {
		mode = ParseMode(string(override))
	}
	d := Decision{Class: class, Mode: mode, Hash: p.hash}
	if mode == ModeLocked && class != ClassRead {
		d.Outcome, d.Code = Deny, events.CodeWorkspaceLocked
		d.Reason = "agent " + r.Agent + " in workspace " + r.Workspace + " is in mode locked: only read tools run"
		return d
	}
	if len(p.rules) > 0 && p.applyRules(&d, r) {
		return d
	}
	switch {
	case class == ClassDestructive:
		d.Outcome, d.Code = Deny, events.CodeCapabilityDenied
		d.Reason = "tool " + r.Tool + " is destructive (or unknown to the policy) and no rule allows it"
	case mode == ModeConfirm && class != ClassRead:
		d.Outcome, d.Code = Hold, events.CodeApprovalRequired
		d.Reason = string(class) + " tool " + r.Tool + " needs approval in mode confirm"
	default:
		d.Outcome = Allow
		d.Reason = string(class) + " tool " + r.Tool + " allowed in mode " + string(mode)
	}
	return d
}

// applyRules runs the rules in order and fills d from the first that
// matches, reporting whether one did. A rule that fails to evaluate fails
// closed: deny and hold rules match, allow rules do not.
func (p *Policy) applyRules(d *Decision, r *events.Request) bool {
	act := &activation{
		tool:      types.String(r.Tool),
		class:     stringVal(classVals, d.Class),
		workspace: types.String(r.Workspace),
		agent:     types.String(r.Agent),
		mode:      stringVal(modeVals, d.Mode),
		rawArgs:   r.Args,
	}
	for i := range p.rules {
		ru := &p.rules[i]
		matched, err := ru.eval(act)
		if err == nil && !matched {
			continue
		}
		if err != nil && ru.action == Allow {
			continue
		}
		d.Outcome, d.Rule = ru.action, ru.name
		switch ru.action {
		case Deny:
			d.Code = events.CodePolicyDenied
		case Hold:
			d.Code = events.CodeApprovalRequired
		}
		switch {
		case err != nil:
			d.Reason = fmt.Sprintf("rule %q failed to evaluate (%s); failing closed: %s", ru.name, errorText(err, r.Args), ru.describe())
		case ru.reason != "":
			d.Reason = ru.reason
		default:
			d.Reason = ru.describe()
		}
		return true
	}
	return false
}

// errorText says what went wrong in an evaluation without quoting the
// args, which its details can (a conversion that failed, a key named by
// another arg): the reason is stored in the op's denied or held event.
// Quoted text is blanked out, and so is every string, key and number of
// the args longer than one byte; at most 200 bytes remain.
func errorText(err error, args []byte) string {
	s := quoted.ReplaceAllString(err.Error(), `"…"`)
	var v any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if dec.Decode(&v) == nil {
		var leaves []string
		var walk func(any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				for k, e := range x {
					leaves = append(leaves, k)
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			case string:
				leaves = append(leaves, x)
			case json.Number:
				leaves = append(leaves, string(x))
			}
		}
		walk(v)
		// Longest first, so a value is not left half blanked by a shorter
		// one inside it.
		sort.Slice(leaves, func(i, j int) bool { return len(leaves[i]) > len(leaves[j]) })
		for _, l := range leaves {
			if len(l) > 1 {
				s = strings.ReplaceAll(s, l, "…")
			}
		}
	}
	return truncate(s, 200)
}

var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?`)

// describe is a rule's reason, or one made from its name and action.
func (r *rule) describe() string {
	if r.reason != "" {
		return r.reason
	}
	switch r.action {
	case Allow:
		return fmt.Sprintf("rule %q allows it", r.name)
	case Deny:
		return fmt.Sprintf("rule %q denies it", r.name)
	default:
		return fmt.Sprintf("rule %q holds it for an approver", r.name)
	}
}
