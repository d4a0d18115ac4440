package store

import "github.com/cockroachdb/pebble/v2"

// SetLiveLimit lets tests fill the live cache with a few ops.
func SetLiveLimit(s *Store, n int) { s.liveLimit = n }

// DB exposes the Pebble handle so tests can tamper with the bytes.
func DB(s *Store) *pebble.DB { return s.db }

// SetMaxCheckpoints lets tests fill the checkpoint limit quickly.
func SetMaxCheckpoints(s *Store, n int) { s.maxCheckpoints = n }
