//go:build !airlocktest

package failpoint

// Enabled reports whether this build has failpoints.
const Enabled = false

// Hit does nothing outside test builds.
func Hit(name, tool string) {}

// Err returns nil outside test builds.
func Err(name, tool string) error { return nil }
