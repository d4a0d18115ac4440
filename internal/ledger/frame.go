package ledger

import (
	"bytes"
	"strconv"
)

// A frame is one record in an op's file:
//
//	<kind> <attempt> <length>\n<length bytes of record>\n
//
// kind is one of the kind constants. A reader takes frames in order and
// stops at the first one that is not whole: the tail a crash left torn.
const (
	kindStarted   = "started"
	kindDone      = "done"
	kindAbandoned = "abandoned"
)

// maxRecord bounds one record's length as read back: a length beyond it is
// a torn or damaged header, not a record.
const maxRecord = 1 << 30

func appendFrame(b []byte, kind, attempt string, rec []byte) []byte {
	b = append(b, kind...)
	b = append(b, ' ')
	b = append(b, attempt...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(rec)), 10)
	b = append(b, '\n')
	b = append(b, rec...)
	return append(b, '\n')
}

// attemptRecords is what an op's file holds for one attempt.
type attemptRecords struct {
	started   []byte // the newest whole started record; nil if none
	hasStart  bool
	done      []byte // the whole result; nil if none
	hasDone   bool
	abandoned bool // after its started record: as if it had none
}

// textKind is the journal's kind of each kind of the text frames.
var textKind = map[string]byte{kindStarted: jStarted, kindDone: jDone, kindAbandoned: jAbandoned}

// take applies one record of kind (the journal's kinds) to a; an
// unknown kind changes nothing.
func (a *attemptRecords) take(kind byte, rec []byte) {
	switch kind {
	case jStarted:
		a.started, a.hasStart, a.abandoned = rec, true, false
	case jDone:
		a.done, a.hasDone = rec, true
	case jAbandoned:
		a.abandoned = true
	}
}

// startedRec is the attempt's newest started record, unless it was
// abandoned; a is nil for an attempt with no record.
func (a *attemptRecords) startedRec() ([]byte, bool) {
	if a == nil || !a.hasStart || a.abandoned {
		return nil, false
	}
	return a.started, true
}

// doneRec is the attempt's whole result, if it has one.
func (a *attemptRecords) doneRec() ([]byte, bool) {
	if a == nil || !a.hasDone {
		return nil, false
	}
	return a.done, true
}

// parsed is an op's file, read.
type parsed struct {
	attempts map[string]*attemptRecords
	// torn is set when the file ends in something that is not a whole
	// frame; tornAttempt names its attempt when its header was whole.
	torn        bool
	tornAttempt string
	tornKind    string
	tornRecord  []byte // what there is of the torn frame's record
}

func parseFrames(b []byte) parsed {
	p := parsed{attempts: map[string]*attemptRecords{}}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			p.torn = true
			return p
		}
		fields := bytes.Fields(b[:nl])
		if len(fields) != 3 || !validName(string(fields[1])) {
			p.torn = true
			return p
		}
		kind, attempt := string(fields[0]), string(fields[1])
		n, err := strconv.Atoi(string(fields[2]))
		if err != nil || n < 0 || n > maxRecord {
			p.torn = true
			return p
		}
		body := b[nl+1:]
		if len(body) < n+1 || body[n] != '\n' {
			p.torn, p.tornAttempt, p.tornKind = true, attempt, kind
			p.tornRecord = body[:min(n, len(body))]
			return p
		}
		rec := body[:n:n]
		a := p.attempts[attempt]
		if a == nil {
			a = &attemptRecords{}
			p.attempts[attempt] = a
		}
		// A kind this version does not know is skipped, as later
		// versions may add some.
		a.take(textKind[kind], rec)
		b = body[n+1:]
	}
	return p
}

// startedOf is attempt's started record: the newest whole one, else what
// a torn tail holds of it (a tail that names no attempt may be anyone's).
// ok is false when the attempt has none, or gave it up.
func (p parsed) startedOf(attempt string) (rec []byte, ok bool) {
	if a := p.attempts[attempt]; a != nil && a.hasStart {
		return a.startedRec()
	}
	if !p.torn {
		return nil, false
	}
	switch {
	case p.tornAttempt == "":
		return []byte{}, true
	case p.tornAttempt == attempt && p.tornKind == kindStarted:
		return p.tornRecord, true
	}
	return nil, false
}

// doneOf is attempt's whole result, if it has one.
func (p parsed) doneOf(attempt string) ([]byte, bool) { return p.attempts[attempt].doneRec() }
