// Package metrics is Airlock's Prometheus instrumentation and its health
// endpoints: what serve --metrics exposes on /metrics, /healthz and /readyz.
//
// Every metric derived from op events is counted by the projector as it
// applies them, after the batch that holds them is committed: the counts
// are of the events this process applied since it started, from every
// gate, executor and approver, wherever they run. Each Airlock process
// runs its own projector over the whole stream, so in a deployment of
// several processes take one instance's series (or max), never their sum.
// Gauges that describe stored state (ops by state, pending holds) are read
// from the projection at scrape time and survive restarts.
package metrics
