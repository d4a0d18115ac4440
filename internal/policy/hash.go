package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/events"
)

// computeHash is the SHA-256 of the canonical JSON of the parsed policy:
// classes and modes as parsed (so a class that does not parse hashes as
// destructive), workspace modes with the default applied, rules with their
// expressions trimmed, and hold_ttl as a Go duration. Two specs that mean
// the same thing, in YAML or JSON and in any key order, share a hash.
func (p *Policy) computeHash() (string, error) {
	type wsNorm struct {
		Mode   Mode            `json:"mode"`
		Root   string          `json:"root"`
		Agents map[string]Mode `json:"agents"`
		// Results only when set, so that a policy without them keeps the
		// hash it had before results were kept.
		Results *events.Retention `json:"results,omitempty"`
		// Webhook only when set, for the same reason: where holds are
		// announced is part of what the policy says.
		Webhook string `json:"webhook,omitempty"`
	}
	type ruleNorm struct {
		Name   string  `json:"name"`
		When   string  `json:"when"`
		Action Outcome `json:"action"`
		Reason string  `json:"reason"`
	}
	wss := make(map[string]wsNorm, len(p.workspaces))
	for n, w := range p.workspaces {
		wss[n] = wsNorm{w.mode, w.root, w.agents, w.results, w.webhook}
	}
	rules := make([]ruleNorm, 0, len(p.spec.Rules))
	for _, r := range p.spec.Rules {
		rules = append(rules, ruleNorm{r.Name, strings.TrimSpace(r.When), Outcome(r.Action), r.Reason})
	}
	norm := struct {
		Tools       map[string]Class  `json:"tools"`
		DefaultMode Mode              `json:"default_mode"`
		Workspaces  map[string]wsNorm `json:"workspaces"`
		Rules       []ruleNorm        `json:"rules"`
		HoldTTL     string            `json:"hold_ttl"`
		Results     *events.Retention `json:"results,omitempty"`
	}{p.tools, p.defaultMode, wss, rules, p.holdTTL.String(), p.results}
	raw, err := json.Marshal(norm)
	if err != nil {
		return "", fmt.Errorf("hash: %w", err)
	}
	canon, err := events.Canonical(raw)
	if err != nil {
		return "", fmt.Errorf("hash: %w", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
