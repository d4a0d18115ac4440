// Command airlock runs Airlock and talks to it: serve, submit, ops, bench.
package main
