package archive

// EncodePlain is a segment as version 1 wrote it (no compression), for
// the tests of what earlier versions stored.
func EncodePlain(s *Segment) []byte {
	return s.appendBody([]byte{versionPlain})
}
