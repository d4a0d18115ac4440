package command_test

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
)

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		`{"argv":["ls"]}`, `{"argv":["sh","-c","echo hi"],"timeout_ms":100}`, `{"argv":[]}`,
		`{"argv":["a\u0000"]}`, `{"argv":null}`, `{"argv":["x"],"x":1}`, `[]`, `{"timeout_ms":1e3,"argv":["x"]}`,
		`{"argv":["x"],"argv":["y"]}`, `{"argv":["x",null]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := command.ParseArgs(raw, time.Minute)
		if err != nil {
			if events.CodeOf(err) != events.CodeInvalidArgs {
				t.Fatalf("error %v is not INVALID_ARGS", err)
			}
			return
		}
		total := 0
		for _, s := range a.Argv {
			total += len(s)
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("NUL accepted: %q", a.Argv)
			}
		}
		if len(a.Argv) == 0 || a.Argv[0] == "" || len(a.Argv) > command.MaxArgv || total > command.MaxArgvBytes {
			t.Fatalf("bad argv accepted: %q", a.Argv)
		}
		if a.TimeoutMS < 0 || a.TimeoutMS > time.Minute.Milliseconds() {
			t.Fatalf("bad timeout accepted: %d", a.TimeoutMS)
		}
	})
}

func FuzzCheckEscalation(f *testing.F) {
	for _, s := range []string{"make && sudo rm -rf /", "echo $(doas id)", "pseudo", "/usr/bin/sudo", "su-do", "s\\udo", `su""do`} {
		f.Add(s, "sudo")
	}
	f.Fuzz(func(t *testing.T, s, word string) {
		err := command.CheckEscalation([]string{s})
		if err != nil && events.CodeOf(err) != events.CodePrivilegeEscalation {
			t.Fatalf("error %v is not PRIVILEGE_ESCALATION", err)
		}
		for _, w := range []string{"sudo", "doas", "su", "pkexec", "run0"} {
			if s == w && err == nil {
				t.Fatalf("%q not refused", s)
			}
			// A word after any separator is always refused.
			for _, sep := range []string{" ", ";", "&&", "|", "$(", "`", "\n", "(", "{ "} {
				if command.CheckEscalation([]string{s + sep + w}) == nil {
					t.Fatalf("%q not refused", s+sep+w)
				}
			}
		}
	})
}
