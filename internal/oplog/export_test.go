package oplog

import "github.com/nats-io/nats.go"

// WaitingAcks is how many acknowledgements the connection's publisher
// still waits for.
func WaitingAcks(nc *nats.Conn) int {
	p, ok := publishers.Load(nc)
	if !ok {
		return 0
	}
	pub := p.(*publisher)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	return len(pub.waiting)
}
