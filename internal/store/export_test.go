package store

// SetLiveLimit lets tests fill the live cache with a few ops.
func SetLiveLimit(s *Store, n int) { s.liveLimit = n }
