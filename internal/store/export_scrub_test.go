package store

import "github.com/cockroachdb/pebble/v2"

// PutRaw writes a raw key and value, as an earlier version of the store
// would have.
func PutRaw(s *Store, key, value []byte) error { return s.db.Set(key, value, pebble.Sync) }

// RawOp is the stored value of op id.
func RawOp(s *Store, id string) ([]byte, error) {
	v, closer, err := s.db.Get(opKey(id))
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}
