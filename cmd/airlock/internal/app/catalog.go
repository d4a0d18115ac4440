package app

import (
	"encoding/json"

	"github.com/airlock-dev/airlock/consumers/executor"
	"github.com/airlock-dev/airlock/events"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/nats-io/nats.go/micro"
)

// catalog lists the tools of reg with the classes pol gives them now (a
// policy reload changes them) and what their executors say of them.
func catalog(reg *executor.Registry, pol *policy.Policy) events.ToolCatalog {
	c := events.ToolCatalog{Tools: []events.ToolInfo{}, PolicyHash: pol.Hash()}
	for _, name := range reg.Tools() {
		ex, _ := reg.Lookup(name)
		info := events.ToolInfo{Name: name, Class: pol.Class(name), InputSchema: events.AnyObjectSchema}
		if d, ok := ex.(executor.Describer); ok {
			desc := d.Describe()
			info.Description, info.Upstream = desc.Text, desc.Upstream
			if json.Valid(desc.InputSchema) {
				info.InputSchema = desc.InputSchema
			}
		}
		c.Tools = append(c.Tools, info)
	}
	return c
}

// serveTools answers events.QueryToolsSubject on svc with the catalog of
// this process's tools.
func (a *App) serveTools(svc micro.Service, reg *executor.Registry) error {
	h := func(req micro.Request) {
		if !events.ValidResponse(req.Reply()) {
			return
		}
		if a.gate == nil {
			_ = req.Error(string(events.CodeUnavailable), "the gate is not running", nil)
			return
		}
		body, err := json.Marshal(catalog(reg, a.gate.Policy()))
		if err != nil {
			_ = req.Error(string(events.CodeInternal), err.Error(), nil)
			return
		}
		_ = req.Respond(body)
	}
	return svc.AddEndpoint("tools", micro.HandlerFunc(h), micro.WithEndpointSubject(events.QueryToolsSubject))
}
