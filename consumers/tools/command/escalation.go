package command

import (
	"path"
	"strings"
	"unicode"

	"github.com/airlock-dev/airlock/events"
)

// escalationWords are the programs whose name, as a word anywhere in argv,
// refuses a call with PRIVILEGE_ESCALATION before anything runs.
var escalationWords = [...]string{"sudo", "doas", "su", "pkexec", "run0"}

// CheckEscalation refuses argv with a PRIVILEGE_ESCALATION *events.Error
// when any entry, read as shell text, holds one of the words sudo, doas,
// su, pkexec or run0. Every entry is read as shell text, not only a
// shell's -c string: an entry is split on white space and on the shell
// separators ; & | ( ) { } ` $ < > (which covers && || $( and newlines),
// and also on = , [ ] (so VAR=sudo and a script's ["sudo","x"] are seen);
// quotes and backslashes are removed from each piece, and a piece matches
// when it, or its last path element (/usr/bin/sudo), is one of the words. So
// ["env","sudo","x"], ["sh","-c","make && sudo rm -rf /"] and
// ["bash","-lc","echo $(doas id)"] are refused, as is ["grep","su","f"];
// "pseudo", "sudoers" and "su-do" are not words of the list.
//
// It is a tripwire against the obvious forms, not a sandbox: a shell can
// assemble the word at run time (s=su; ${s}do) and no scan of argv sees
// that.
func CheckEscalation(argv []string) error {
	for i, arg := range argv {
		if w, ok := escalationWord(arg); ok {
			// w is one of escalationWords, never text from argv.
			return events.Errorf(events.CodePrivilegeEscalation, "exec: argv[%d] runs %s: privilege escalation is refused", i, w)
		}
	}
	return nil
}

// escalationWord returns the first escalation word in s read as shell
// text: the word of the list, also when s names it by a path.
func escalationWord(s string) (string, bool) {
	for _, piece := range strings.FieldsFunc(s, isShellSeparator) {
		w := strings.Map(func(r rune) rune {
			if r == '\'' || r == '"' || r == '\\' {
				return -1
			}
			return r
		}, piece)
		if isEscalation(w) {
			return w, true
		}
		if strings.Contains(w, "/") {
			if base := path.Base(w); isEscalation(base) {
				return base, true
			}
		}
	}
	return "", false
}

func isShellSeparator(r rune) bool {
	if unicode.IsSpace(r) {
		return true
	}
	switch r {
	case ';', '&', '|', '(', ')', '{', '}', '`', '$', '<', '>', '=', ',', '[', ']':
		return true
	}
	return false
}

func isEscalation(w string) bool {
	for _, e := range escalationWords {
		if w == e {
			return true
		}
	}
	return false
}
