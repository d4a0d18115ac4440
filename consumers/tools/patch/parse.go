package patch

import (
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/events"
)

// What a file diff does to its file; the values appear in results and
// ledgers.
const (
	ActionAdd    = "add"
	ActionModify = "modify"
	ActionDelete = "delete"
)

// devNull names the missing side of an add or a delete.
const devNull = "/dev/null"

// fileDiff is one file's part of a patch.
type fileDiff struct {
	path   string // relative to the root, a/ and b/ stripped, not yet checked
	action string
	hunks  []hunk
	line   int // 1-based line of the file's first header line
}

// parser reads a patch line by line. Lines are split on "\n" only, so a
// "\r" belongs to the line's content (files with CRLF endings).
type parser struct {
	lines []string
	i     int // index of the next line; its number is i+1
}

// parse reads a unified diff. Every error is INVALID_PATCH naming a line.
// It never touches the file system.
func parse(text string) ([]*fileDiff, error) {
	lines := strings.Split(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // the final newline ends a line, it does not start one
	}
	p := &parser{lines: lines}
	var files []*fileDiff
	seen := map[string]int{}
	for p.i < len(p.lines) {
		line := p.lines[p.i]
		var f *fileDiff
		var err error
		switch {
		case p.blankToEnd():
			p.i = len(p.lines)
			continue
		case strings.HasPrefix(line, "diff --git "):
			f, err = p.gitFile()
		case strings.HasPrefix(line, "diff "):
			// The command line diff -r prints before a plain file diff.
			p.i++
			if p.i >= len(p.lines) || !strings.HasPrefix(p.lines[p.i], "--- ") {
				return nil, p.errorf(p.i-1, "a \"diff \" line is not followed by a \"--- \" line")
			}
			continue
		case strings.HasPrefix(line, "--- "):
			f, err = p.plainFile()
		case strings.HasPrefix(line, "Binary files "), line == "GIT binary patch":
			return nil, p.errorf(p.i, "binary patches are refused")
		default:
			return nil, p.errorf(p.i, "unexpected line: a file diff starts with \"diff --git \" or \"--- \"")
		}
		if err != nil {
			return nil, err
		}
		if first, dup := seen[f.path]; dup {
			return nil, events.Errorf(events.CodeInvalidPatch, "line %d: the file is named twice (first at line %d)", f.line, first)
		}
		seen[f.path] = f.line
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, events.Errorf(events.CodeInvalidPatch, "no file diff in the patch")
	}
	return files, checkNesting(files)
}

// checkNesting refuses a patch where one target is a directory on the path
// of another: both cannot be files.
func checkNesting(files []*fileDiff) error {
	names := make(map[string]int, len(files))
	for _, f := range files {
		names[f.path] = f.line
	}
	for _, f := range files {
		for i := range len(f.path) {
			if line, ok := names[f.path[:i]]; ok && f.path[i] == '/' {
				return events.Errorf(events.CodeInvalidPatch, "the file at patch line %d is also a directory of %s", line, f.ref())
			}
		}
	}
	return nil
}

// gitFile reads a file diff that starts with "diff --git a/P b/P".
func (p *parser) gitFile() (*fileDiff, error) {
	start := p.i
	name, ok := gitName(strings.TrimPrefix(p.lines[p.i], "diff --git "))
	if !ok {
		return nil, p.errorf(p.i, "cannot read the line: want \"diff --git a/PATH b/PATH\" with one PATH (renames, copies and quoted names are refused)")
	}
	f := &fileDiff{path: name, action: ActionModify, line: start + 1}
	p.i++
	if err := p.gitHeaders(f); err != nil {
		return nil, err
	}
	if p.i >= len(p.lines) || !strings.HasPrefix(p.lines[p.i], "--- ") {
		// No hunks: git writes none for an empty file added or deleted.
		if f.action == ActionModify {
			return nil, p.errorf(p.i, "no hunks for the file of line %d", f.line)
		}
		return f, nil
	}
	oldName, newName, err := p.names(true)
	if err != nil {
		return nil, err
	}
	switch {
	case (oldName == devNull) != (f.action == ActionAdd):
		return nil, p.errorf(p.i-2, "the \"--- \" line disagrees with the git header at line %d", start+1)
	case (newName == devNull) != (f.action == ActionDelete):
		return nil, p.errorf(p.i-1, "the \"+++ \" line disagrees with the git header at line %d", start+1)
	case oldName != devNull && oldName != name, newName != devNull && newName != name:
		return nil, p.errorf(p.i-2, "file names disagree with \"diff --git\" at line %d (renames are refused)", start+1)
	}
	return f, p.hunks(f)
}

// gitHeaders reads the extended header lines after "diff --git", up to the
// "--- " line or whatever follows the file diff.
func (p *parser) gitHeaders(f *fileDiff) error {
	for ; p.i < len(p.lines); p.i++ {
		line := p.lines[p.i]
		switch {
		case strings.HasPrefix(line, "index "):
		case strings.HasPrefix(line, "new file mode "):
			if mode := strings.TrimPrefix(line, "new file mode "); mode != "100644" {
				return p.errorf(p.i, "new file mode other than 100644 is refused: only regular 100644 files are created")
			}
			if f.action != ActionModify {
				return p.errorf(p.i, "a file mode line after another")
			}
			f.action = ActionAdd
		case strings.HasPrefix(line, "deleted file mode "):
			if mode := strings.TrimPrefix(line, "deleted file mode "); mode != "100644" && mode != "100755" {
				return p.errorf(p.i, "deleted file mode other than 100644 and 100755 is refused: only regular files are deleted")
			}
			if f.action != ActionModify {
				return p.errorf(p.i, "a file mode line after another")
			}
			f.action = ActionDelete
		case strings.HasPrefix(line, "old mode "), strings.HasPrefix(line, "new mode "):
			return p.errorf(p.i, "mode changes are refused")
		case strings.HasPrefix(line, "rename from "), strings.HasPrefix(line, "rename to "),
			strings.HasPrefix(line, "copy from "), strings.HasPrefix(line, "copy to "),
			strings.HasPrefix(line, "similarity index "), strings.HasPrefix(line, "dissimilarity index "):
			return p.errorf(p.i, "renames and copies are refused")
		case line == "GIT binary patch", strings.HasPrefix(line, "Binary files "):
			return p.errorf(p.i, "binary patches are refused")
		default:
			return nil
		}
	}
	return nil
}

// plainFile reads a file diff that starts with "--- ".
func (p *parser) plainFile() (*fileDiff, error) {
	start := p.i
	oldName, newName, err := p.names(false)
	if err != nil {
		return nil, err
	}
	f := &fileDiff{path: newName, action: ActionModify, line: start + 1}
	switch {
	case oldName == devNull && newName == devNull:
		return nil, p.errorf(start, "both sides are %s", devNull)
	case oldName == devNull:
		f.action = ActionAdd
	case newName == devNull:
		f.action, f.path = ActionDelete, oldName
	case oldName != newName:
		return nil, p.errorf(start, "old name and new name differ (renames are refused)")
	}
	return f, p.hunks(f)
}

// names reads the "--- " and "+++ " lines. In a git diff the names must
// carry the a/ and b/ prefixes; in a plain diff they are stripped when
// present.
func (p *parser) names(git bool) (oldName, newName string, err error) {
	oldName, err = p.name("--- ", "a/", git)
	if err != nil {
		return "", "", err
	}
	if p.i >= len(p.lines) || !strings.HasPrefix(p.lines[p.i], "+++ ") {
		return "", "", p.errorf(p.i, "\"--- \" line not followed by a \"+++ \" line")
	}
	newName, err = p.name("+++ ", "b/", git)
	return oldName, newName, err
}

// name reads one file-name line: the name ends at the first tab (a
// timestamp may follow it).
func (p *parser) name(lead, prefix string, git bool) (string, error) {
	s := strings.TrimPrefix(p.lines[p.i], lead)
	s, _, _ = strings.Cut(s, "\t")
	switch {
	case strings.HasPrefix(s, `"`):
		return "", p.errorf(p.i, "quoted file names are refused")
	case s == devNull:
	case strings.HasPrefix(s, prefix):
		s = s[len(prefix):]
	case git:
		return "", p.errorf(p.i, "git file name lacks the %s prefix", prefix)
	}
	p.i++
	return s, nil
}

// gitName reads "a/P b/P" and returns P. Only the symmetric form is
// accepted, so a name with spaces is still read without doubt.
func gitName(s string) (string, bool) {
	if len(s) < 7 || len(s)%2 == 0 || !strings.HasPrefix(s, "a/") {
		return "", false
	}
	n := (len(s) - 5) / 2
	name := s[2 : 2+n]
	if s[2+n:] != " b/"+name || strings.HasPrefix(name, `"`) {
		return "", false
	}
	return name, true
}

// blankToEnd reports whether every line from the current one is empty.
func (p *parser) blankToEnd() bool {
	for _, l := range p.lines[p.i:] {
		if l != "" {
			return false
		}
	}
	return true
}

// errorf returns INVALID_PATCH naming the line at index i. Messages name
// lines, never quote them: they end up in the op's events, which keep no
// text of the args, and the patch and its paths are args.
func (p *parser) errorf(i int, format string, args ...any) error {
	return events.Errorf(events.CodeInvalidPatch, "line %d: "+format, append([]any{i + 1}, args...)...)
}

// ref names f in a message by the patch line of its header, not by its
// path (see errorf).
func (f *fileDiff) ref() string { return fmt.Sprintf("the file at patch line %d", f.line) }
