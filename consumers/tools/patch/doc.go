// Package patch is the apply_patch executor: it applies a unified diff
// under a workspace's root, all or nothing, and recovers a lost attempt
// from its ledger.
//
// # Order of work
//
// Execute decodes the args, parses the whole patch, checks every path
// (lexical rules first, then a walk of each path's existing components,
// which refuses any symlink), reads every target and computes every
// post-image in memory. Only when all of that succeeds does it write the
// op's ledger (each file's pre-image and intended post-image hash), and
// only then the files, one by one, each replaced atomically.
//
// # Recovery
//
// Recover compares the files with the ledger: all at the post-image is
// done, all at the pre-image runs again, anything else is ambiguous. No
// ledger means nothing was written.
//
// docs/apply_patch.md describes the accepted diffs, the path rules and the
// limits.
package patch
