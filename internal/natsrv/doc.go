// Package natsrv starts the embedded NATS server with JetStream that
// `airlock serve` runs by default.
package natsrv
