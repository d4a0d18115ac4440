package natsrv

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/minio/highwayhash"
)

// The file store's message record, as nats-server v2 writes it
// (filestore.go, writeMsgRecordLocked): a 22-byte header (the record's
// length with the high bit set when it has headers, the sequence, the
// time stamp, the subject's length), the subject, the headers' length and
// the headers when there are any, the message, and a HighwayHash-64 of
// the sequence, the time stamp, the subject, the headers and the message,
// keyed with the SHA-256 of "<stream>-<block index>".
const (
	recordHeader   = 22
	recordChecksum = 8
	headersBit     = 1 << 31
)

// CheckBlocks reads every message block of every stream under the
// embedded server's store directory (<data>/jetstream) and checks every
// record's checksum, as nats-server does only for the blocks it loads: a
// flipped byte in a message Airlock already projected is found here. It
// reads and writes nothing else. The error names the file and the
// offset of the first bad record.
//
// With tail set, the last record of each stream's newest block may be
// torn or fail its checksum: a process killed during a write can leave
// it so, and nats-server cuts it off when it starts (it was never
// acknowledged). A start checks with tail; an offline verify without.
//
// strict names the streams whose every record Airlock itself wrote (nil:
// none). Their records are also checked for what the checksum does not
// cover: the headers' length and, without headers, the subject's. A
// stream that agents or other clients write to is checked by its
// checksums only: a client may store headers nats-server does not parse
// or a subject of any characters, and a start must not refuse them.
func CheckBlocks(storeDir string, tail bool, strict func(stream string) bool) (blocks int, err error) {
	files, err := filepath.Glob(filepath.Join(storeDir, "jetstream", "*", "streams", "*", "msgs", "*.blk"))
	if err != nil {
		return 0, err
	}
	type block struct {
		path, stream string
		index        uint32
	}
	var all []block
	newest := map[string]uint32{} // stream dir -> its newest block
	for _, f := range files {
		index, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(f), ".blk"), 10, 32)
		if err != nil {
			continue // not a block file
		}
		b := block{f, filepath.Base(filepath.Dir(filepath.Dir(f))), uint32(index)}
		all = append(all, b)
		if d := filepath.Dir(f); b.index >= newest[d] {
			newest[d] = b.index
		}
	}
	// The blocks are checked in parallel, a worker a core: a million
	// ops' blocks are about 2 GB to read and hash at every start. The
	// error is the first bad block's in file order, as one worker would
	// have found it.
	errs := make([]error, len(all))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(all))) {
		wg.Go(func() {
			var buf []byte // a worker's: a block is read into the last one's memory
			for i := range next {
				b := all[i]
				errs[i] = checkBlock(&buf, b.path, b.stream, b.index, tail && b.index == newest[filepath.Dir(b.path)], strict != nil && strict(b.stream))
			}
		})
	}
	for i := range all {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return blocks, err
		}
		blocks++
	}
	return blocks, nil
}

func checkBlock(buf *[]byte, path, stream string, index uint32, tail, strict bool) error {
	b, err := readInto(buf, path)
	if err != nil {
		return err
	}
	key := sha256.Sum256([]byte(fmt.Sprintf("%s-%d", stream, index)))
	hh, err := highwayhash.NewDigest64(key[:])
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	for off := 0; off < len(b); {
		if len(b)-off < recordHeader+recordChecksum {
			if tail {
				return nil
			}
			return fmt.Errorf("%s: a torn record at offset %d", path, off)
		}
		hdr := b[off : off+recordHeader]
		rl := int(le.Uint32(hdr[0:]) &^ headersBit)
		hasHeaders := le.Uint32(hdr[0:])&headersBit != 0
		slen := int(le.Uint16(hdr[20:]))
		if rl < recordHeader+recordChecksum || off+rl > len(b) || recordHeader+slen > rl-recordChecksum {
			if tail && (off+rl >= len(b) || rl < recordHeader+recordChecksum) && lastRecordAt(b, off) {
				return nil
			}
			return fmt.Errorf("%s: record at offset %d has a bad length", path, off)
		}
		rec := b[off : off+rl]
		body := rec[recordHeader : rl-recordChecksum]
		subj, rest := body[:slen], body[slen:]
		var mhdr []byte
		if hasHeaders {
			if len(rest) < 4 || int(le.Uint32(rest)) > len(rest)-4 {
				return fmt.Errorf("%s: record at offset %d has a bad headers length", path, off)
			}
			n := int(le.Uint32(rest))
			mhdr, rest = rest[4:4+n], rest[4+n:]
			// The headers' length is not in the checksum (nats-server
			// hashes the headers and the message as one run): a flipped
			// byte in it moves the cut, and only the headers' own frame
			// shows it.
			if strict && !headersFramed(mhdr) {
				return fmt.Errorf("%s: record at offset %d (sequence %d) has a bad headers length", path, off, le.Uint64(hdr[4:])&^(3<<62))
			}
		}
		// Erased records carry random bytes, tombstones no subject.
		if strict && le.Uint64(hdr[4:])&(3<<62) == 0 && !airlockSubject(subj) {
			return fmt.Errorf("%s: record at offset %d (sequence %d) has a bad subject length", path, off, le.Uint64(hdr[4:])&^(3<<62))
		}
		hh.Reset()
		hh.Write(hdr[4:20])
		hh.Write(subj)
		hh.Write(mhdr)
		hh.Write(rest)
		var sum [recordChecksum]byte
		if got := hh.Sum(sum[:0]); string(got) != string(rec[rl-recordChecksum:]) {
			if tail && off+rl == len(b) {
				return nil // the newest record, cut off at start
			}
			return fmt.Errorf("%s: record at offset %d (sequence %d) fails its checksum", path, off, le.Uint64(hdr[4:])&^(3<<62))
		}
		off += rl
	}
	return nil
}

// readInto reads a whole file into *buf, grown when the file is larger
// than any before it: a start reads about 2 GB of blocks a million ops,
// and fresh memory for each costs its zeroing and page faults.
func readInto(buf *[]byte, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// One byte more than the size: a block that grew since its size was
	// taken is read again whole, as os.ReadFile would.
	n := int(fi.Size())
	if cap(*buf) < n+1 {
		*buf = make([]byte, n+1)
	}
	b := (*buf)[:n+1]
	m, err := io.ReadFull(f, b)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return b[:m], nil
	}
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// lastRecordAt reports whether a record with a bad length at off can only
// be the file's last: the file ends within what its header claims.
func lastRecordAt(b []byte, off int) bool {
	rl := int(binary.LittleEndian.Uint32(b[off:]) &^ headersBit)
	return off+rl >= len(b)
}

// headersFramed reports whether h is a whole NATS header block: the
// version line first and the blank line last (or nothing at all).
func headersFramed(h []byte) bool {
	return len(h) == 0 || bytes.HasPrefix(h, []byte("NATS/1.0")) && bytes.HasSuffix(h, []byte("\r\n\r\n"))
}

// airlockSubject reports whether s can be the subject of a record
// Airlock wrote: letters, digits and "-/_=.$" (its subjects and bucket
// keys), no empty token. The subject's length is not in the checksum
// when a record has no headers (the subject and the message are hashed
// as one run): a cut moved into the message shows here (a JSON or sealed
// message is made of other characters), a cut moved back within the
// subject does not, and nothing in the record could tell.
func airlockSubject(s []byte) bool {
	if len(s) == 0 || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i, c := range s {
		if !ownedSubjectByte(c) || c == '.' && s[i-1] == '.' {
			return false
		}
	}
	return true
}

func ownedSubjectByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-/_=.$", c) >= 0
}
