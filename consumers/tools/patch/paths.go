package patch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/airlock-dev/airlock/events"
)

// absent is the hash of a file that does not exist.
const absent = "absent"

// The messages of this file never name a path: they end up in the op's
// events, which keep no text of the args. Callers say which file an error
// is about (fileErr) by its place in the patch or the ledger.

// pathless drops the path an *fs.PathError carries, keeping its cause.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// fileErr says which file err is about, keeping err's code.
func fileErr(ref string, err error) error {
	var e *events.Error
	if errors.As(err, &e) {
		return &events.Error{Code: e.Code, Message: ref + ": " + e.Message, Retryable: e.Retryable}
	}
	return fmt.Errorf("%s: %w", ref, err)
}

// checkName applies the lexical path rules: a clean relative path of
// printable characters with no "..", "." or empty component. Breaking them
// is PATH_ESCAPE.
func checkName(name string) error {
	escape := func(why string) error {
		return events.Errorf(events.CodePathEscape, "%s", why)
	}
	switch {
	case name == "":
		return escape("empty path")
	case strings.HasPrefix(name, "/"):
		return escape("absolute path")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return escape("control character or NUL in path")
		}
	}
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "..":
			return escape("\"..\" component")
		case "", ".":
			return escape("empty or \".\" component")
		}
	}
	return nil
}

// inspect walks name's components under root without following any: a
// symlink anywhere on the path is PATH_ESCAPE, even one that points inside
// the root. A directory component that is not a directory, or a target
// that exists and is not a regular file, is PATCH_CONFLICT. It returns the
// target's info, or nil when the target does not exist.
func inspect(root *os.Root, name string) (fs.FileInfo, error) {
	parts := strings.Split(name, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		fi, err := root.Lstat(prefix)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("apply_patch: %w", pathless(err))
		}
		last := i == len(parts)-1
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return nil, events.Errorf(events.CodePathEscape, "component %d of %d of its path is a symlink; patches never go through symlinks", i+1, len(parts))
		case !last && !fi.IsDir():
			return nil, events.Errorf(events.CodePatchConflict, "component %d of %d of its path is not a directory", i+1, len(parts))
		case last && !fi.Mode().IsRegular():
			return nil, events.Errorf(events.CodePatchConflict, "not a regular file")
		case last:
			return fi, nil
		}
	}
	return nil, nil // not reached: parts is never empty
}

// checkAll checks every file's path before anything else is looked at:
// first the lexical rules for all, then the walks for all, so an escape
// anywhere in the patch wins over a conflict anywhere. It returns the
// target infos, nil for absent targets.
func checkAll(root *os.Root, files []*fileDiff, guard func(string) bool) ([]fs.FileInfo, error) {
	for _, f := range files {
		if err := checkName(f.path); err != nil {
			return nil, fileErr(f.ref(), err)
		}
		if guard != nil && guard(f.path) {
			return nil, events.Errorf(events.CodePathEscape, "%s: inside the patch ledger directory", f.ref())
		}
	}
	infos := make([]fs.FileInfo, len(files))
	var conflict error
	for i, f := range files {
		fi, err := inspect(root, f.path)
		if err != nil {
			err = fileErr(f.ref(), err)
		}
		switch events.CodeOf(err) {
		case "":
			infos[i] = fi
		case events.CodePatchConflict:
			if conflict == nil {
				conflict = err
			}
		default:
			return nil, err
		}
	}
	return infos, conflict
}

// readTarget reads the regular file name under root, at most limit bytes;
// a larger file is INVALID_PATCH. It opens without following a final
// symlink and without blocking on a FIFO swapped in since inspect.
func readTarget(root *os.Root, name string, limit int64) ([]byte, fs.FileMode, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("apply_patch: %w", pathless(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("apply_patch: %w", pathless(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, events.Errorf(events.CodePatchConflict, "not a regular file")
	}
	if fi.Size() > limit {
		return nil, 0, tooLarge(fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("apply_patch: read: %w", pathless(err))
	}
	if int64(len(b)) > limit {
		return nil, 0, tooLarge(int64(len(b)), limit)
	}
	return b, fi.Mode().Perm(), nil
}

func tooLarge(n, limit int64) error {
	return events.Errorf(events.CodeInvalidPatch, "%d bytes, over the limit of %d per file", n, limit)
}

// currentHash says what name under root holds now, for recovery: its hash,
// "absent", or why it is neither (a symlink, a directory). It reads
// without a size limit, streaming.
func currentHash(root *os.Root, name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	fi, err := inspect(root, name)
	if err != nil {
		return "", err
	}
	if fi == nil {
		return absent, nil
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("apply_patch: %w", pathless(err))
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("apply_patch: read: %w", pathless(err))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
