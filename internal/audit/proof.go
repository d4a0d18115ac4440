package audit

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/events"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// ProofHeader is the first line of an op proof file.
const ProofHeader = "airlock.dev/op-proof/v1"

// Limits of a proof file.
const (
	MaxProofBytes  = 4 << 20
	MaxProofLeaves = 1024
)

// ProofSource is what Prove reads: stored hashes and leaves.
type ProofSource interface {
	tlog.HashReader
	Leaf(i int64) ([]byte, error)
}

// ProvenLeaf is one leaf of an op with its inclusion proof.
type ProvenLeaf struct {
	Index int64
	Data  []byte
	Leaf  *Leaf
	Proof tlog.RecordProof
}

// Proof is an op's leaves, each proven included in the tree a signed
// checkpoint names. It is self-contained: the verifier key checks it.
type Proof struct {
	Op         string
	Leaves     []ProvenLeaf
	Checkpoint *Checkpoint
}

// Prove builds the proof of the op's leaves at indexes under checkpoint
// c. Leaves the checkpoint does not cover yet are left out; later is the
// count of them.
func Prove(src ProofSource, op string, indexes []int64, c *Checkpoint) (p *Proof, later int, err error) {
	p = &Proof{Op: op, Checkpoint: c}
	for _, i := range indexes {
		if i >= c.Size {
			later++
			continue
		}
		if len(p.Leaves) == MaxProofLeaves {
			return nil, 0, fmt.Errorf("audit: op %s has more than %d leaves", op, MaxProofLeaves)
		}
		data, err := src.Leaf(i)
		if err != nil {
			return nil, 0, err
		}
		l, err := DecodeLeaf(data)
		if err != nil {
			return nil, 0, fmt.Errorf("audit: leaf %d: %w", i, err)
		}
		rp, err := tlog.ProveRecord(c.Size, i, src)
		if err != nil {
			return nil, 0, fmt.Errorf("audit: prove leaf %d: %w", i, err)
		}
		// Prove only what checks: a store that drifted from its
		// checkpoint must not hand out proofs that fail later.
		if err := tlog.CheckRecord(rp, c.Size, c.Root, i, tlog.RecordHash(data)); err != nil {
			return nil, 0, fmt.Errorf("audit: leaf %d does not check against checkpoint %d: %w", i, c.Size, err)
		}
		p.Leaves = append(p.Leaves, ProvenLeaf{Index: i, Data: data, Leaf: l, Proof: rp})
	}
	return p, later, nil
}

// Marshal writes the proof file:
//
//	airlock.dev/op-proof/v1
//	op <op id>
//	leaf <index> <base64 leaf>
//	<base64 proof hash>   (one line per hash)
//	...                   (more leaves)
//	<blank line>
//	<the signed checkpoint>
func (p *Proof) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nop %s\n", ProofHeader, p.Op)
	for _, l := range p.Leaves {
		fmt.Fprintf(&b, "leaf %d %s\n", l.Index, base64.StdEncoding.EncodeToString(l.Data))
		for _, h := range l.Proof {
			fmt.Fprintf(&b, "%s\n", base64.StdEncoding.EncodeToString(h[:]))
		}
	}
	b.WriteString("\n")
	b.Write(p.Checkpoint.Note)
	return b.Bytes()
}

// ErrProof wraps every reason CheckProof refuses a file.
var ErrProof = errors.New("proof refused")

// CheckProof parses a proof file and verifies it with v alone: the
// checkpoint's signature, each leaf's inclusion under the checkpoint's root
// (with tlog and again with transparency-dev/merkle), each leaf's encoding,
// and that every leaf names the op.
func CheckProof(file []byte, v note.Verifier) (*Proof, error) {
	bad := func(format string, args ...any) (*Proof, error) {
		return nil, fmt.Errorf("%w: %s", ErrProof, fmt.Sprintf(format, args...))
	}
	if len(file) > MaxProofBytes {
		return bad("%d bytes, limit %d", len(file), MaxProofBytes)
	}
	head, cpNote, found := bytes.Cut(file, []byte("\n\n"))
	if !found {
		return bad("no checkpoint")
	}
	c, err := OpenCheckpoint(cpNote, v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProof, err)
	}
	lines := strings.Split(string(head), "\n")
	if len(lines) < 3 || lines[0] != ProofHeader {
		return bad("not an %s file", ProofHeader)
	}
	op, ok := strings.CutPrefix(lines[1], "op ")
	if !ok || op == "" {
		return bad("second line must be \"op <op id>\"")
	}
	p := &Proof{Op: op, Checkpoint: c}
	var cur *ProvenLeaf
	for n, line := range lines[2:] {
		if rest, ok := strings.CutPrefix(line, "leaf "); ok {
			if len(p.Leaves) == MaxProofLeaves {
				return bad("more than %d leaves", MaxProofLeaves)
			}
			idx, b64, _ := strings.Cut(rest, " ")
			i, err := strconv.ParseInt(idx, 10, 64)
			if err != nil || i < 0 || strconv.FormatInt(i, 10) != idx {
				return bad("line %d: bad leaf index %q", n+3, idx)
			}
			if k := len(p.Leaves); k > 0 && i <= p.Leaves[k-1].Index {
				return bad("line %d: leaf %d is not after leaf %d", n+3, i, p.Leaves[k-1].Index)
			}
			data, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return bad("line %d: leaf %d: %v", n+3, i, err)
			}
			p.Leaves = append(p.Leaves, ProvenLeaf{Index: i, Data: data})
			cur = &p.Leaves[len(p.Leaves)-1]
			continue
		}
		if cur == nil {
			return bad("line %d: a proof hash before any leaf", n+3)
		}
		h, err := tlog.ParseHash(line)
		if err != nil {
			return bad("line %d: %v", n+3, err)
		}
		cur.Proof = append(cur.Proof, h)
	}
	if len(p.Leaves) == 0 {
		return bad("no leaves")
	}
	for k := range p.Leaves {
		l := &p.Leaves[k]
		if l.Index >= c.Size {
			return bad("leaf %d is beyond the checkpoint's size %d", l.Index, c.Size)
		}
		if l.Leaf, err = DecodeLeaf(l.Data); err != nil {
			return bad("leaf %d: %v", l.Index, err)
		}
		if l.Leaf.Op != op {
			return bad("leaf %d belongs to op %q, not %q", l.Index, l.Leaf.Op, op)
		}
		if _, subjOp, _, _, ok := events.OpSubjectParts(l.Leaf.Subject); !ok || subjOp != op {
			return bad("leaf %d is stored on %q, not on a subject of op %q", l.Index, l.Leaf.Subject, op)
		}
		rh := tlog.RecordHash(l.Data)
		if err := tlog.CheckRecord(l.Proof, c.Size, c.Root, l.Index, rh); err != nil {
			return bad("leaf %d is not in the tree of checkpoint %d: %v", l.Index, c.Size, err)
		}
		path := make([][]byte, len(l.Proof))
		for j := range l.Proof {
			path[j] = l.Proof[j][:]
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(l.Index), uint64(c.Size), rh[:], path, c.Root[:]); err != nil {
			return bad("leaf %d fails the merkle check: %v", l.Index, err)
		}
	}
	return p, nil
}
