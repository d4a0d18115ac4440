// Package bench measures the pipeline against raw JetStream on the same
// embedded server and storage settings, in one run.
package bench
