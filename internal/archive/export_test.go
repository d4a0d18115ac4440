package archive

// Encode appends the segment's encoding to b (Encoder.Encode), for tests.
func (s *Segment) Encode(b []byte) []byte {
	var e Encoder
	return append(b, e.Encode(s)...)
}

// EncodePlain is a segment as version 1 wrote it (no compression), for
// the tests of what earlier versions stored.
func EncodePlain(s *Segment) []byte {
	return s.appendBody([]byte{versionPlain})
}
