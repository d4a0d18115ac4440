package oplog

// WaitingAcks is how many acknowledgements the writer's publisher still
// waits for.
func WaitingAcks(w *Writer) int { return w.pub.Waiting() }
