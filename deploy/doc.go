// Package deploy holds no code: it is the configuration Airlock ships for
// running in production, and the tests that keep that configuration in
// step with the code.
//
//   - nats-server.conf: a single NATS server with Airlock's accounts
//     (checked against the generated block by internal/natsrv).
//   - cluster/: a three-node JetStream cluster with the same accounts.
//   - systemd/airlock.service: `airlock serve` as a hardened service.
//   - prometheus/: scrape configuration and alert rules.
//   - grafana/airlock-dashboard.json: a dashboard of Airlock's metrics and
//     JetStream's.
//
// The tests parse every file, check every metric a dashboard panel or an
// alert names against internal/metrics/names.go and the pinned metrics of
// prometheus-nats-exporter, and start the cluster's three nodes on
// loopback to provision Airlock's streams with three replicas. README.md
// beside this file explains how to use them.
package deploy
