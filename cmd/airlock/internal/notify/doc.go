// Package notify announces held calls on webhooks: for each hold of a
// workspace whose policy names one (workspaces.<ws>.notify.webhook), it
// POSTs a JSON message that chat tools' incoming webhooks accept, a short
// text line and the hold's fields, with a link where an approver reviews
// it (docs/notifications.md).
//
// # Reading holds
//
// A Notifier reads the held events of every workspace from AIRLOCK_OPS
// through one durable consumer, Consumer, shared by every Airlock process
// of a deployment: each hold is announced by one of them. The consumer
// delivers only holds appended after it was first created, never the
// stream's history. The notifier is off the decision path: a hold is
// recorded and answered by the gate whatever becomes of its
// notification. While no workspace has a webhook (Config.Active) it
// takes no hold; they wait in the consumer until one is set.
//
// # Delivery
//
// A message is acked once its delivery has ended: delivered (a 2xx),
// failed (a refusal: another status) or dropped (MaxAttempts attempts
// without a 2xx). Until then the consumer is told every AckWait/3 that it
// is in progress, so the retries need no AckWait as long as their whole
// budget, and a process that stops or dies mid-delivery leaves the hold
// unacked: another process, or the next start, announces it. So a hold is
// announced at least once; a process lost between the endpoint's answer
// and the ack announces it twice. Up to MaxInFlight holds are delivered
// at once, each with its own retries, so a slow endpoint holds up at most
// that many.
//
// # Concurrency
//
// Run once; Ready may be called from any goroutine.
package notify
