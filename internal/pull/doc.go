// Package pull feeds a JetStream pull consumer's messages to handlers in
// batches.
package pull
