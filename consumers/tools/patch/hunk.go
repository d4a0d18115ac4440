package patch

import (
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/events"
)

// hunk is one "@@ -a,b +c,d @@" block. Its lines keep their "\n", except a
// last line marked "\ No newline at end of file".
type hunk struct {
	oldStart, oldLen int
	newStart, newLen int
	old, new         []string
	oldNoEOL         bool // the old side's last line has no newline
	newNoEOL         bool // the new side's last line has no newline
	line             int  // 1-based line of the header
}

// pos is the 0-based index of the first old line the hunk replaces. A
// hunk with no old lines inserts after line oldStart.
func (h *hunk) pos() int {
	if h.oldLen == 0 {
		return h.oldStart
	}
	return h.oldStart - 1
}

// newPos is pos on the new side.
func (h *hunk) newPos() int {
	if h.newLen == 0 {
		return h.newStart
	}
	return h.newStart - 1
}

// hunks reads the hunks of f: at least one, in order, not overlapping,
// with new-side starts that agree with the old side.
func (p *parser) hunks(f *fileDiff) error {
	end, delta := 0, 0
	for p.i < len(p.lines) && strings.HasPrefix(p.lines[p.i], "@@") {
		if n := len(f.hunks); n > 0 && (f.hunks[n-1].oldNoEOL || f.hunks[n-1].newNoEOL) {
			return p.errorf(p.i, "hunk after \"\\ No newline at end of file\"")
		}
		h, err := p.hunk()
		if err != nil {
			return err
		}
		if h.pos() < end {
			return p.errorf(h.line-1, "hunk overlaps or precedes the previous hunk of the file")
		}
		if h.newPos() != h.pos()+delta {
			return p.errorf(h.line-1, "hunk new start %d disagrees with its old start %d", h.newStart, h.oldStart)
		}
		end, delta = h.pos()+h.oldLen, delta+h.newLen-h.oldLen
		f.hunks = append(f.hunks, h)
	}
	switch {
	case len(f.hunks) == 0:
		return p.errorf(p.i, "no hunk for the file of line %d", f.line)
	case f.action == ActionAdd && (len(f.hunks) != 1 || f.hunks[0].oldLen != 0 || f.hunks[0].oldStart != 0):
		return p.errorf(f.hunks[0].line-1, "a new file takes one hunk \"@@ -0,0 +1,N @@\"")
	case f.action == ActionDelete && (len(f.hunks) != 1 || f.hunks[0].newLen != 0 || f.hunks[0].newStart != 0):
		return p.errorf(f.hunks[0].line-1, "a deleted file takes one hunk \"@@ -1,N +0,0 @@\"")
	}
	return nil
}

// hunk reads one hunk: its header, then exactly as many lines as the
// header counts on each side, with "\ No newline at end of file" markers.
// An empty line counts as an empty context line (some tools strip the
// space).
func (p *parser) hunk() (hunk, error) {
	h, ok := parseHunkHeader(p.lines[p.i])
	if !ok {
		return h, p.errorf(p.i, "malformed hunk header: want \"@@ -a,b +c,d @@\"")
	}
	h.line = p.i + 1
	if h.oldLen == 0 && h.newLen == 0 {
		return h, p.errorf(p.i, "empty hunk")
	}
	p.i++
	oldLeft, newLeft := h.oldLen, h.newLen
	var last byte // kind of the previous line: ' ', '-', '+', or '\\'
	for {
		if p.i >= len(p.lines) {
			if oldLeft > 0 || newLeft > 0 {
				return h, p.errorf(p.i, "patch ends inside the hunk at line %d: %d old and %d new lines missing", h.line, oldLeft, newLeft)
			}
			return h, nil
		}
		line := p.lines[p.i]
		if line == "" {
			line = " "
		}
		kind := line[0]
		if oldLeft == 0 && newLeft == 0 && (kind != '\\' || last == '\\') {
			return h, nil
		}
		switch kind {
		case ' ', '-', '+':
			takesOld, takesNew := kind != '+', kind != '-'
			if (takesOld && oldLeft == 0) || (takesNew && newLeft == 0) {
				return h, p.errorf(p.i, "hunk at line %d has more lines than its header counts", h.line)
			}
			if (takesOld && h.oldNoEOL) || (takesNew && h.newNoEOL) {
				return h, p.errorf(p.i, "line after \"\\ No newline at end of file\" on the same side")
			}
			s := line[1:] + "\n"
			if takesOld {
				h.old = append(h.old, s)
				oldLeft--
			}
			if takesNew {
				h.new = append(h.new, s)
				newLeft--
			}
		case '\\':
			if last == 0 || last == '\\' {
				return h, p.errorf(p.i, "a \"\\\" line does not follow a hunk line")
			}
			if last != '+' {
				h.oldNoEOL = true
				h.old[len(h.old)-1] = strings.TrimSuffix(h.old[len(h.old)-1], "\n")
			}
			if last != '-' {
				h.newNoEOL = true
				h.new[len(h.new)-1] = strings.TrimSuffix(h.new[len(h.new)-1], "\n")
			}
		default:
			return h, p.errorf(p.i, "hunk at line %d ends early (%d old and %d new lines missing)", h.line, oldLeft, newLeft)
		}
		last = kind
		p.i++
	}
}

// parseHunkHeader reads "@@ -a[,b] +c[,d] @@[ section]".
func parseHunkHeader(s string) (hunk, bool) {
	var h hunk
	rest, ok := strings.CutPrefix(s, "@@ -")
	if !ok {
		return h, false
	}
	oldR, rest, ok := strings.Cut(rest, " +")
	if !ok {
		return h, false
	}
	newR, rest, ok := strings.Cut(rest, " @@")
	if !ok || (rest != "" && rest[0] != ' ') {
		return h, false
	}
	if h.oldStart, h.oldLen, ok = parseRange(oldR); !ok {
		return h, false
	}
	if h.newStart, h.newLen, ok = parseRange(newR); !ok {
		return h, false
	}
	return h, true
}

// parseRange reads "a" or "a,b". A range with lines starts at line 1 or
// later.
func parseRange(s string) (start, n int, ok bool) {
	a, b, hasLen := strings.Cut(s, ",")
	if start, ok = parseCount(a); !ok {
		return 0, 0, false
	}
	n = 1
	if hasLen {
		if n, ok = parseCount(b); !ok {
			return 0, 0, false
		}
	}
	if n > 0 && start == 0 {
		return 0, 0, false
	}
	return start, n, true
}

// parseCount reads a decimal count of at most nine digits.
func parseCount(s string) (int, bool) {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// apply computes f's post-image from pre. Context and removed lines must
// match exactly at the positions the hunks name: no offset, no fuzz. A
// mismatch is PATCH_CONFLICT naming the file and the hunk.
func apply(f *fileDiff, pre []byte) ([]byte, error) {
	lines := splitLines(pre)
	out := make([]string, 0, len(lines))
	next := 0 // index of the first pre line not yet copied
	for i := range f.hunks {
		h := &f.hunks[i]
		pos := h.pos()
		conflict := func(format string, args ...any) error {
			return events.Errorf(events.CodePatchConflict, "%s: hunk %d (line %d): "+format,
				append([]any{f.ref(), i + 1, h.line}, args...)...)
		}
		if pos+len(h.old) > len(lines) {
			return nil, conflict("file has %d lines, the hunk needs lines %d to %d", len(lines), pos+1, pos+len(h.old))
		}
		for k, want := range h.old {
			if have := lines[pos+k]; have != want {
				return nil, conflict("line %d differs from the hunk's", pos+k+1)
			}
		}
		if len(h.new) > 0 && pos == len(lines) && pos > 0 && !strings.HasSuffix(lines[pos-1], "\n") {
			return nil, conflict("appends after a last line without newline that the hunk does not replace")
		}
		if h.newNoEOL && pos+len(h.old) != len(lines) {
			return nil, conflict("the hunk ends its side without newline but the file goes on")
		}
		out = append(out, lines[next:pos]...)
		out = append(out, h.new...)
		next = pos + len(h.old)
	}
	out = append(out, lines[next:]...)
	var b strings.Builder
	for k, l := range out {
		if k < len(out)-1 && !strings.HasSuffix(l, "\n") {
			return nil, events.Errorf(events.CodePatchConflict, "%s: the result would join a line without newline to the next", f.ref())
		}
		b.WriteString(l)
	}
	post := []byte(b.String())
	if f.action == ActionDelete && len(post) != 0 {
		return nil, events.Errorf(events.CodePatchConflict, "%s: file has content the deletion does not list", f.ref())
	}
	return post, nil
}

// splitLines splits b after each "\n"; a last line without one is kept.
func splitLines(b []byte) []string {
	var lines []string
	s := string(b)
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			lines = append(lines, s)
			break
		}
		lines = append(lines, s[:i+1])
		s = s[i+1:]
	}
	return lines
}
