// Package app wires Airlock's parts into one process: the embedded (or an
// external) NATS server, the streams, the gate, the executors, the
// projector and its query service. `airlock serve`, the benchmark and the
// tests all start Airlock through Start.
package app
