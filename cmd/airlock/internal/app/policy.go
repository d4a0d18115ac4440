package app

import (
	"context"
	"errors"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/internal/policy"
)

// PolicyHash names the policy the gate decides with.
func (a *App) PolicyHash() string { return a.gate.Policy().Hash() }

// Policy is the policy the gate decides with.
func (a *App) Policy() *policy.Policy { return a.gate.Policy() }

// ReloadPolicy reads Config.PolicyFile again and, when it is valid, makes
// it the policy of every decision from now on, recording the change as a
// policy.loaded event. An invalid file changes nothing and is an error.
func (a *App) ReloadPolicy(ctx context.Context) error {
	if a.cfg.PolicyFile == "" {
		return errors.New("app: no policy file to reload")
	}
	p, err := policy.Load(a.cfg.PolicyFile)
	if err != nil {
		return err
	}
	if p, err = withClasses(p, a.mcpClasses); err != nil {
		return err
	}
	return a.gate.SetPolicy(ctx, p, a.cfg.PolicyFile)
}

// loadPolicy builds the policy the gate starts with, and says where it
// came from.
func loadPolicy(cfg Config, reg *executor.Registry, mcpClasses map[string]string) (*policy.Policy, string, error) {
	if cfg.PolicyFile != "" {
		spec := cfg.Policy
		if len(spec.Tools) > 0 || spec.DefaultMode != "" || len(spec.Workspaces) > 0 || len(spec.Rules) > 0 || spec.HoldTTL != "" {
			return nil, "", errors.New("app: a policy file and a policy spec exclude each other")
		}
		p, err := policy.Load(cfg.PolicyFile)
		if err != nil {
			return nil, "", err
		}
		p, err = withClasses(p, mcpClasses)
		return p, cfg.PolicyFile, err
	}
	// The built-in policy, with the classes in-process executors declare
	// for tools it does not name, shaped by the spec (serve's flags).
	spec := policy.Default().Spec()
	for t, c := range reg.Classes() {
		if _, named := spec.Tools[t]; !named {
			spec.Tools[t] = c
		}
	}
	for t, c := range cfg.Policy.Tools {
		spec.Tools[t] = c
	}
	if cfg.Policy.DefaultMode != "" {
		spec.DefaultMode = cfg.Policy.DefaultMode
	}
	if len(cfg.Policy.Workspaces) > 0 {
		spec.Workspaces = cfg.Policy.Workspaces
	}
	spec.Rules = append(spec.Rules, cfg.Policy.Rules...)
	if cfg.Policy.HoldTTL != "" {
		spec.HoldTTL = cfg.Policy.HoldTTL
	}
	p, err := policy.New(spec)
	return p, "built-in", err
}

// withClasses adds to a policy file's tools the classes of the MCP
// upstreams' tools it does not name: the MCP configuration, which the
// operator writes too, classifies them (a tool it does not is
// destructive). The file's own classes win. Airlock's built-in tools get
// no class this way: a policy file names them or they are destructive.
func withClasses(p *policy.Policy, classes map[string]string) (*policy.Policy, error) {
	if len(classes) == 0 {
		return p, nil
	}
	spec := p.Spec()
	if spec.Tools == nil {
		spec.Tools = map[string]string{}
	}
	for t, c := range classes {
		if _, named := spec.Tools[t]; !named {
			spec.Tools[t] = c
		}
	}
	return policy.New(spec)
}
