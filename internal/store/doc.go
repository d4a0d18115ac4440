// Package store is the projector's Pebble store: ops by id, by state and in
// creation order, and the last applied stream sequence, always written in
// the same batch as the state it describes.
//
// # Keys
//
//	m/applied                       last applied stream sequence (8 bytes, big endian)
//	m/n/<state>, m/counted          ops in each state (see counts.go)
//	o/<op id>                       the op (events.Op) in its binary form (oprecord.go); JSON when an earlier version wrote it
//	a/<first seq>/<op id>           every op in creation order
//	s/<state>/<first seq>/<op id>   ops by state, in creation order
//	x/<first seq>/<op id>           terminal ops whose request is to be erased (see scrub.go)
//	t/...                           the audit log (see log.go)
package store
