package oplog

import (
	"github.com/airlock-dev/airlock/internal/jspub"
	"github.com/nats-io/nats.go"
)

// WaitingAcks is how many acknowledgements the connection's publisher
// still waits for.
func WaitingAcks(nc *nats.Conn) int {
	p, err := jspub.For(nc)
	if err != nil {
		return -1
	}
	return p.Waiting()
}
