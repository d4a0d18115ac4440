package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// The journal holds every op's records in shared, append-only segment
// files, Dir/journal-<16 hex digits>.log, numbered in the order they were
// created. A frame is
//
//	magic "ALJ1" (4 bytes) | length n (4, big endian) | CRC-32C of the body (4) | body (n)
//	body: kind (1) | len(op) (1) | op | len(attempt) (1) | attempt | record
//
// A reader takes every whole frame whose checksum holds, in segment order,
// and skips anything else byte by byte to the next magic: a frame that is
// not whole on disk was never acknowledged to its writer (Begin, Finish
// and Abandon return only once theirs is written, and synced unless
// NoSync), so the effect it would have recorded was not taken (a started
// record) or its result counts as lost (a done record: the attempt reads
// as started without a result, ambiguous).
//
// A process appends to a segment of its own, created on its first append
// and never one a reader found; it starts another past segmentBytes.
// Forgetting an op appends a forget frame. A segment is removed once it
// and every older one hold no frame of an op not forgotten; when more
// than maxSegments are kept, the ops that still hold the oldest are
// written again, whole, into the newest (and synced) so that it can go.
// One write per record, no file created or removed per op: creating and
// removing a file per op costs a journaled change of the directory each,
// and concurrent creates contend in the file system.

const (
	journalPrefix = "journal-"
	journalSuffix = ".log"
	frameHeader   = 12
)

var frameMagic = []byte("ALJ1")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Frame kinds of the journal. Kinds this version does not know are
// skipped, so later versions may add some.
const (
	jStarted   byte = 1
	jDone      byte = 2
	jAbandoned byte = 3
	jForget    byte = 4
)

// segmentBytes is the size past which a process starts a new segment, and
// maxSegments how many segments are kept before the oldest's live ops are
// copied forward. Variables so that tests can make them small.
var (
	segmentBytes int64 = 16 << 20
	maxSegments        = 4
)

// journals are this process's journals, by directory: one per directory,
// whatever number of Ledger values name it.
var journals struct {
	mu sync.Mutex
	m  map[string]*journal
}

// journalOf is dir's journal, read from disk on first use.
func journalOf(dir string) (*journal, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	journals.mu.Lock()
	defer journals.mu.Unlock()
	if j := journals.m[abs]; j != nil {
		return j, nil
	}
	j, err := openJournal(abs)
	if err != nil {
		return nil, err
	}
	if journals.m == nil {
		journals.m = map[string]*journal{}
	}
	journals.m[abs] = j
	return j, nil
}

// Reload drops what this process holds of the ledger in dir, so that its
// next use reads it from disk again: for a process that takes over a
// directory another process wrote (a test that crashed a helper process
// writing to it). Nothing in this process may be using the ledger then.
func Reload(dir string) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	journals.mu.Lock()
	j := journals.m[abs]
	delete(journals.m, abs)
	journals.mu.Unlock()
	if j != nil {
		j.close()
	}
}

// ReadKept lists the ops the ledger in dir holds records of, sorted, as
// they are on disk now, whichever process wrote them; it changes nothing.
func ReadKept(dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// A segment the writer removes between the listing and the read is
	// read again from a new listing: the ops it held were copied to a
	// newer segment or forgotten.
	for try := 0; ; try++ {
		j, err := openJournal(abs)
		if errors.Is(err, fs.ErrNotExist) && try < 10 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return j.kept(), nil
	}
}

// opState is what the journal holds of one op not forgotten.
type opState struct {
	attempts map[string]*attemptRecords
	segs     []uint64 // the segments holding its frames
	recs     []recLoc // where its frames' records are, to overwrite when it is forgotten
}

// recLoc is where one record is in a segment.
type recLoc struct {
	seg uint64
	off int64
	n   int
}

func (o *opState) attempt(a string) *attemptRecords {
	r := o.attempts[a]
	if r == nil {
		r = &attemptRecords{}
		o.attempts[a] = r
	}
	return r
}

// startedOf is attempt's newest started record, unless it was abandoned;
// o is nil for an op the journal holds nothing of.
func (o *opState) startedOf(attempt string) ([]byte, bool) {
	if o == nil {
		return nil, false
	}
	return o.attempts[attempt].startedRec()
}

// doneOf is attempt's result, if it has one.
func (o *opState) doneOf(attempt string) ([]byte, bool) {
	if o == nil {
		return nil, false
	}
	return o.attempts[attempt].doneRec()
}

type journal struct {
	dir string

	mu       sync.Mutex
	fd       int    // the segment this process appends to; -1 before its first append
	seg      uint64 // its number
	size     int64
	next     uint64   // the number of the next segment to create
	segs     []uint64 // kept segments, oldest first
	live     map[uint64]int
	ops      map[string]*opState
	old      map[string]bool // ops with records in the earlier layouts
	appended uint64          // bytes appended by this process, all segments
	retired  []int           // descriptors of full segments, to close
	failed   error
	// unscrubbed are the records of ops read back as forgotten.
	unscrubbed []recLoc

	syncMu sync.Mutex
	synced atomic.Uint64 // appended bytes known to be on disk
}

// openJournal reads dir's segments. A directory that does not exist is
// an empty ledger: nothing is created until the first append.
func openJournal(dir string) (*journal, error) {
	j := &journal{dir: dir, fd: -1, next: 1, live: map[uint64]int{}, ops: map[string]*opState{}, old: map[string]bool{}}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, en := range entries {
		name := en.Name()
		if n, ok := segmentNumber(name); ok && en.Type().IsRegular() {
			j.segs = append(j.segs, n)
			continue
		}
		op, isFile := strings.CutSuffix(name, suffix)
		switch {
		case isFile && en.Type().IsRegular() && validName(op):
			j.old[op] = true
		case en.IsDir() && validName(name):
			j.old[name] = true // the layout before that
		}
	}
	slices.Sort(j.segs)
	for _, n := range j.segs {
		b, err := os.ReadFile(j.segmentPath(n))
		if err != nil {
			return nil, err
		}
		scanFrames(b, func(off int64, kind byte, op, attempt string, rec []byte) {
			j.apply(n, off, kind, op, attempt, bytes.Clone(rec))
		})
		j.next = n + 1
	}
	for _, o := range j.ops {
		for _, s := range o.segs {
			j.live[s]++
		}
	}
	// Nothing is removed or overwritten until this process appends: a
	// reader (ReadKept) changes nothing.
	return j, nil
}

func segmentNumber(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, journalPrefix)
	if !ok {
		return 0, false
	}
	hex, ok = strings.CutSuffix(hex, journalSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(hex, 16, 64)
	return n, err == nil
}

func (j *journal) segmentPath(n uint64) string {
	return filepath.Join(j.dir, fmt.Sprintf("%s%016x%s", journalPrefix, n, journalSuffix))
}

// apply takes one frame of segment seg, whose record is at off, into the
// ops' state (not the live counts).
func (j *journal) apply(seg uint64, off int64, kind byte, op, attempt string, rec []byte) {
	if kind == jForget {
		if o := j.ops[op]; o != nil {
			// Read back: overwritten by this process's first append,
			// in case the process that forgot it stopped before it did.
			j.unscrubbed = append(j.unscrubbed, o.recs...)
			delete(j.ops, op)
		}
		return
	}
	if kind != jStarted && kind != jDone && kind != jAbandoned {
		return
	}
	o := j.ops[op]
	if o == nil {
		o = &opState{attempts: map[string]*attemptRecords{}}
		j.ops[op] = o
	}
	if !slices.Contains(o.segs, seg) {
		o.segs = append(o.segs, seg)
	}
	if len(rec) > 0 {
		o.recs = append(o.recs, recLoc{seg: seg, off: off, n: len(rec)})
	}
	o.attempt(attempt).take(kind, rec)
}

// scanFrames calls fn for each whole frame of b whose checksum holds, in
// order, with the offset of its record in b, skipping anything else.
func scanFrames(b []byte, fn func(off int64, kind byte, op, attempt string, rec []byte)) {
	for i := 0; len(b)-i >= frameHeader; {
		if !bytes.Equal(b[i:i+4], frameMagic) {
			k := bytes.Index(b[i+1:], frameMagic)
			if k < 0 {
				return
			}
			i += 1 + k
			continue
		}
		n := int64(binary.BigEndian.Uint32(b[i+4:]))
		end := int64(i) + frameHeader + n
		if end > int64(len(b)) || crc32.Checksum(b[i+frameHeader:end], castagnoli) != binary.BigEndian.Uint32(b[i+8:]) {
			i++ // a torn or damaged frame: look for the next one
			continue
		}
		if kind, op, attempt, rec, ok := parseBody(b[i+frameHeader : end]); ok {
			fn(end-int64(len(rec)), kind, op, attempt, rec)
		}
		i = int(end)
	}
}

func parseBody(body []byte) (kind byte, op, attempt string, rec []byte, ok bool) {
	if len(body) < 3 {
		return 0, "", "", nil, false
	}
	kind = body[0]
	ol := int(body[1])
	if len(body) < 2+ol+1 {
		return 0, "", "", nil, false
	}
	op = string(body[2 : 2+ol])
	al := int(body[2+ol])
	rest := body[3+ol:]
	if len(rest) < al {
		return 0, "", "", nil, false
	}
	attempt, rec = string(rest[:al]), rest[al:]
	if !validName(op) || (kind != jForget && !validName(attempt)) {
		return 0, "", "", nil, false
	}
	return kind, op, attempt, rec, true
}

func appendJournalFrame(b []byte, kind byte, op, attempt string, rec []byte) []byte {
	start := len(b)
	b = append(b, frameMagic...)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b = append(b, kind, byte(len(op)))
	b = append(b, op...)
	b = append(b, byte(len(attempt)))
	b = append(b, attempt...)
	b = append(b, rec...)
	body := b[start+frameHeader:]
	binary.BigEndian.PutUint32(b[start+4:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[start+8:], crc32.Checksum(body, castagnoli))
	return b
}

// fail stops the journal with err, once, and returns what stopped it.
func (j *journal) fail(err error) error {
	if j.failed == nil {
		j.failed = fmt.Errorf("%w; the ledger in %s takes no more records until Airlock restarts: check the disk, then restart", err, j.dir)
	}
	return j.failed
}

// write appends one frame for op, after check (if any) accepts op's
// state, both under the journal's lock, and waits for it to be on disk
// when sync.
func (j *journal) write(kind byte, op, attempt string, rec []byte, sync bool, check func(*opState) error) error {
	frame := appendJournalFrame(nil, kind, op, attempt, rec)
	rec = frame[len(frame)-len(rec):] // kept in memory: the caller's slice is the caller's
	j.mu.Lock()
	if j.failed != nil {
		j.mu.Unlock()
		return j.failed
	}
	if check != nil {
		if err := check(j.ops[op]); err != nil {
			j.mu.Unlock()
			return err
		}
	}
	if kind == jForget && j.ops[op] == nil {
		j.mu.Unlock()
		return nil
	}
	if err := j.room(int64(len(frame))); err != nil {
		j.mu.Unlock()
		return err
	}
	if err := pwriteAll(j.fd, frame, j.size); err != nil {
		// Cut off what part of the frame went in, so that the next one
		// follows the last whole frame (a reader would skip it anyway).
		if terr := ignoringEINTR(func() error { return syscall.Ftruncate(j.fd, j.size) }); terr != nil {
			err = j.fail(fmt.Errorf("write %s: %w, then truncate: %w", j.segmentPath(j.seg), err, terr))
		} else {
			err = fmt.Errorf("write %s: %w", j.segmentPath(j.seg), err)
		}
		j.mu.Unlock()
		return err
	}
	off := j.size + int64(len(frame)-len(rec))
	j.size += int64(len(frame))
	j.appended += uint64(len(frame))
	end := j.appended
	j.applyLive(off, kind, op, attempt, rec)
	j.mu.Unlock()
	if sync {
		return j.syncTo(end)
	}
	return nil
}

// applyLive takes a frame this process appended to its segment, whose
// record is at off, into the ops' state and the live counts.
func (j *journal) applyLive(off int64, kind byte, op, attempt string, rec []byte) {
	if kind == jForget {
		if o := j.ops[op]; o != nil {
			j.scrub(o)
			for _, s := range o.segs {
				j.live[s]--
			}
			delete(j.ops, op)
			j.dropUnused()
		}
		return
	}
	o := j.ops[op]
	if o == nil || !slices.Contains(o.segs, j.seg) {
		j.live[j.seg]++
	}
	j.apply(j.seg, off, kind, op, attempt, rec)
}

// scrub overwrites the records of a forgotten op with zeros where they
// are, so that its result (a program's output, in the clear) does not
// stay in a segment that other ops keep: its frames then read as damaged,
// and are skipped. Best effort: a segment that cannot be opened keeps
// them until it is removed.
func (j *journal) scrub(o *opState) {
	var zeros [512]byte
	// Segments other than this process's are opened once each.
	other := map[uint64]int{}
	defer func() {
		for _, fd := range other {
			_ = syscall.Close(fd)
		}
	}()
	for _, r := range o.recs {
		fd, ok := j.fd, j.fd >= 0 && r.seg == j.seg
		if !ok {
			if fd, ok = other[r.seg]; !ok {
				var err error
				if fd, err = openFile(j.segmentPath(r.seg), syscall.O_WRONLY); err != nil {
					continue
				}
				other[r.seg] = fd
			}
		}
		for off, left := r.off, r.n; left > 0; {
			n := min(left, len(zeros))
			if pwriteAll(fd, zeros[:n], off) != nil {
				break
			}
			off += int64(n)
			left -= n
		}
	}
}

// room makes sure this process has a segment to append n more bytes to.
func (j *journal) room(n int64) error {
	if j.fd >= 0 && (j.size == 0 || j.size+n <= segmentBytes) {
		return nil
	}
	if j.fd >= 0 {
		// The full segment goes to disk whole before the next one takes
		// appends: a sync that read the old descriptor covers what was
		// appended before, and later syncs need only the new one.
		if err := ignoringEINTR(func() error { return syscall.Fdatasync(j.fd) }); err != nil {
			return j.fail(fmt.Errorf("sync %s: %w", j.segmentPath(j.seg), err))
		}
		raiseTo(&j.synced, j.appended)
	}
	// The next segment is created before the full one is let go: if it
	// cannot be (a full disk, no descriptor left), appends go on in the
	// full one and the next append tries again.
	var fd int
	var seg uint64
	for {
		seg = j.next
		j.next++
		var err error
		fd, err = openFile(j.segmentPath(seg), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY)
		if err == syscall.EEXIST {
			continue
		}
		if err != nil {
			j.next-- // the number is still free
			if j.fd >= 0 {
				return nil
			}
			return fmt.Errorf("create %s: %w", j.segmentPath(seg), err)
		}
		break
	}
	if err := syncDirFD(j.dir); err != nil {
		_ = syscall.Close(fd)
		_ = syscall.Unlink(j.segmentPath(seg))
		return j.fail(fmt.Errorf("sync %s: %w", j.dir, err))
	}
	if j.fd >= 0 {
		j.retire(j.fd)
	}
	j.fd, j.seg, j.size = fd, seg, 0
	j.segs = append(j.segs, seg)
	if len(j.unscrubbed) > 0 {
		j.scrub(&opState{recs: j.unscrubbed})
		j.unscrubbed = nil
	}
	j.dropUnused()
	return j.compact()
}

// compact copies the ops that still hold the oldest kept segment into the
// current one, whole, while more than maxSegments are kept, so that the
// oldest can be removed.
func (j *journal) compact() error {
	for len(j.segs) > maxSegments {
		oldest := j.segs[0]
		var buf []byte
		var moved []*opState
		var locs [][]recLoc
		for op, o := range j.ops {
			if !slices.Contains(o.segs, oldest) {
				continue
			}
			var at []recLoc
			frame := func(kind byte, attempt string, rec []byte) {
				buf = appendJournalFrame(buf, kind, op, attempt, rec)
				if len(rec) > 0 {
					at = append(at, recLoc{seg: j.seg, off: j.size + int64(len(buf)-len(rec)), n: len(rec)})
				}
			}
			for attempt, a := range o.attempts {
				switch {
				case a.hasStart && a.abandoned:
					// One frame, not started then abandoned: a copy
					// cut between the two would read as started.
					frame(jAbandoned, attempt, nil)
				case a.hasStart:
					frame(jStarted, attempt, a.started)
				}
				if a.hasDone {
					frame(jDone, attempt, a.done)
				}
			}
			moved = append(moved, o)
			locs = append(locs, at)
		}
		if len(buf) > 0 {
			if err := pwriteAll(j.fd, buf, j.size); err != nil {
				// The ops keep the oldest segment; the copies go again
				// at the next segment.
				if terr := ignoringEINTR(func() error { return syscall.Ftruncate(j.fd, j.size) }); terr != nil {
					return j.fail(fmt.Errorf("write %s: %w, then truncate: %w", j.segmentPath(j.seg), err, terr))
				}
				return nil
			}
			if err := ignoringEINTR(func() error { return syscall.Fdatasync(j.fd) }); err != nil {
				return j.fail(fmt.Errorf("sync %s: %w", j.segmentPath(j.seg), err))
			}
			j.size += int64(len(buf))
			j.appended += uint64(len(buf))
			raiseTo(&j.synced, j.appended)
		}
		for i, o := range moved {
			j.live[oldest]--
			o.segs = slices.DeleteFunc(o.segs, func(s uint64) bool { return s == oldest })
			o.recs = append(slices.DeleteFunc(o.recs, func(r recLoc) bool { return r.seg == oldest }), locs[i]...)
			if !slices.Contains(o.segs, j.seg) {
				o.segs = append(o.segs, j.seg)
				j.live[j.seg]++
			}
		}
		j.dropUnused()
		if len(j.segs) > 0 && j.segs[0] == oldest {
			return nil // not removed (see dropUnused): tried again at the next segment
		}
	}
	return nil
}

// dropUnused removes the oldest segments while they hold no live op's
// frame (in order: a forget frame in a newer segment must outlive the
// frames it cancels), never the one this process appends to.
func (j *journal) dropUnused() {
	for j.fd >= 0 && len(j.segs) > 0 && j.live[j.segs[0]] == 0 && !(j.fd >= 0 && j.segs[0] == j.seg) {
		n := j.segs[0]
		if err := ignoringEINTR(func() error { return syscall.Unlink(j.segmentPath(n)) }); err != nil && err != syscall.ENOENT {
			return // kept; tried again when the next op is forgotten
		}
		delete(j.live, n)
		j.segs = j.segs[1:]
	}
}

// retire closes fd now if no sync is under way (one could be using it),
// else leaves it to the next sync.
func (j *journal) retire(fd int) {
	if j.syncMu.TryLock() {
		_ = syscall.Close(fd)
		for _, r := range j.retired {
			_ = syscall.Close(r)
		}
		j.retired = nil
		j.syncMu.Unlock()
		return
	}
	j.retired = append(j.retired, fd)
}

// syncTo returns once the first end bytes this process appended are on
// disk. Callers that arrive while a sync runs share the next one: one
// fdatasync for every record appended by then.
func (j *journal) syncTo(end uint64) error {
	if j.synced.Load() >= end {
		return nil
	}
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if j.synced.Load() >= end {
		return nil
	}
	j.mu.Lock()
	if j.synced.Load() >= end {
		// A new segment's start synced the full one, with these bytes.
		j.mu.Unlock()
		return nil
	}
	if j.failed != nil {
		j.mu.Unlock()
		return j.failed
	}
	fd, target, seg := j.fd, j.appended, j.seg
	retired := j.retired
	j.retired = nil
	j.mu.Unlock()
	for _, r := range retired {
		_ = syscall.Close(r)
	}
	if err := ignoringEINTR(func() error { return syscall.Fdatasync(fd) }); err != nil {
		j.mu.Lock()
		err = j.fail(fmt.Errorf("sync %s: %w", j.segmentPath(seg), err))
		j.mu.Unlock()
		return err
	}
	raiseTo(&j.synced, target)
	return nil
}

func raiseTo(v *atomic.Uint64, n uint64) {
	for {
		cur := v.Load()
		if cur >= n || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

func (j *journal) close() {
	j.syncMu.Lock()
	j.mu.Lock()
	for _, r := range j.retired {
		_ = syscall.Close(r)
	}
	j.retired = nil
	if j.fd >= 0 {
		_ = syscall.Close(j.fd)
		j.fd = -1
	}
	j.failed = errors.New("closed")
	j.mu.Unlock()
	j.syncMu.Unlock()
}

// view runs f with op's state and whether it has records in an earlier
// layout, under the journal's lock.
func (j *journal) view(op string, f func(o *opState, old bool)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f(j.ops[op], j.old[op])
}

// kept lists the ops with records, in either layout.
func (j *journal) kept() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]string, 0, len(j.ops)+len(j.old))
	for op := range j.ops {
		out = append(out, op)
	}
	for op := range j.old {
		if j.ops[op] == nil {
			out = append(out, op)
		}
	}
	slices.Sort(out)
	return out
}

func syncDirFD(dir string) error {
	fd, err := openFile(dir, syscall.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return err
	}
	err = ignoringEINTR(func() error { return syscall.Fsync(fd) })
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	return err
}
