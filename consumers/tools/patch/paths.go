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

// checkName applies the lexical path rules: a clean relative path of
// printable characters with no "..", "." or empty component. Breaking them
// is PATH_ESCAPE.
func checkName(name string) error {
	escape := func(why string) error {
		return events.Errorf(events.CodePathEscape, "%s: %s", quote(name), why)
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
			return nil, fmt.Errorf("apply_patch: %w", err)
		}
		last := i == len(parts)-1
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return nil, events.Errorf(events.CodePathEscape, "%s: %s is a symlink; patches never go through symlinks", quote(name), quote(prefix))
		case !last && !fi.IsDir():
			return nil, events.Errorf(events.CodePatchConflict, "%s: %s is not a directory", quote(name), quote(prefix))
		case last && !fi.Mode().IsRegular():
			return nil, events.Errorf(events.CodePatchConflict, "%s: not a regular file", quote(name))
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
			return nil, err
		}
		if guard != nil && guard(f.path) {
			return nil, events.Errorf(events.CodePathEscape, "%s: inside the patch ledger directory", quote(f.path))
		}
	}
	infos := make([]fs.FileInfo, len(files))
	var conflict error
	for i, f := range files {
		fi, err := inspect(root, f.path)
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
		return nil, 0, fmt.Errorf("apply_patch: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("apply_patch: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, events.Errorf(events.CodePatchConflict, "%s: not a regular file", quote(name))
	}
	if fi.Size() > limit {
		return nil, 0, tooLarge(name, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("apply_patch: read %s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, 0, tooLarge(name, int64(len(b)), limit)
	}
	return b, fi.Mode().Perm(), nil
}

func tooLarge(name string, n, limit int64) error {
	return events.Errorf(events.CodeInvalidPatch, "%s: %d bytes, over the limit of %d per file", quote(name), n, limit)
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
		return "", fmt.Errorf("apply_patch: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("apply_patch: read %s: %w", name, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
