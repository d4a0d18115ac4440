package command_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-dev/airlock/consumers/tools/command"
	"github.com/airlock-dev/airlock/events"
)

func TestCheckEscalation(t *testing.T) {
	refused := []struct {
		name string
		argv []string
	}{
		{"bare", []string{"sudo", "ls"}},
		{"bare alone", []string{"sudo"}},
		{"each word doas", []string{"doas", "id"}},
		{"each word su", []string{"su", "-"}},
		{"each word pkexec", []string{"pkexec", "id"}},
		{"each word run0", []string{"run0", "id"}},
		{"absolute path", []string{"/usr/bin/sudo", "ls"}},
		{"relative path", []string{"./sudo"}},
		{"trailing slash", []string{"/bin/su/"}},
		{"after env", []string{"env", "sudo", "x"}},
		{"after env assignment", []string{"env", "A=1", "doas", "x"}},
		{"find -exec", []string{"find", ".", "-exec", "sudo", "rm", "{}", ";"}},
		{"xargs", []string{"xargs", "pkexec"}},
		{"sh -c plain", []string{"sh", "-c", "sudo rm -rf /"}},
		{"after &&", []string{"sh", "-c", "make && sudo rm -rf /"}},
		{"after ||", []string{"sh", "-c", "false||sudo id"}},
		{"after ;", []string{"sh", "-c", "true;sudo id"}},
		{"after |", []string{"sh", "-c", "echo pw | sudo -S id"}},
		{"after &", []string{"sh", "-c", "sleep 1 & doas id"}},
		{"in $( )", []string{"bash", "-lc", "echo $(doas id)"}},
		{"in backticks", []string{"sh", "-c", "echo `su -c id`"}},
		{"in subshell", []string{"sh", "-c", "(pkexec id)"}},
		{"in group", []string{"sh", "-c", "{ run0 id; }"}},
		{"after newline", []string{"sh", "-c", "echo hi\nsudo id"}},
		{"after tab", []string{"sh", "-c", "echo\tsudo"}},
		{"after redirection", []string{"sh", "-c", "echo x >/dev/null</dev/null sudo id"}},
		{"double quoted", []string{"sh", "-c", `"sudo" id`}},
		{"single quoted", []string{"sh", "-c", `'su' - root`}},
		{"quotes inside the word", []string{"sh", "-c", `su""do id`}},
		{"backslash inside the word", []string{"sh", "-c", `s\udo id`}},
		{"leading backslash", []string{"sh", "-c", `\sudo id`}},
		{"path in shell text", []string{"bash", "-c", "x; /usr/bin/sudo -i"}},
		{"variable assignment", []string{"sh", "-c", "CMD=sudo; $CMD id"}},
		{"prefix assignment", []string{"sh", "-c", "FOO=1 sudo id"}},
		{"if then", []string{"sh", "-c", "if true; then doas id; fi"}},
		{"as $0 of sh -c", []string{"sh", "-c", "id", "sudo"}},
		{"script list", []string{"python3", "-c", `subprocess.run(["sudo","id"])`}},
		{"script call", []string{"python3", "-c", `os.system('pkexec id')`}},
		{"awk system", []string{"awk", `BEGIN{system("sudo id")}`}},
		{"later entry", []string{"ls", "-l", "x", "y", "run0"}},
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			err := command.CheckEscalation(tc.argv)
			require.Error(t, err)
			assert.Equal(t, events.CodePrivilegeEscalation, events.CodeOf(err))
		})
	}
	allowed := []struct {
		name string
		argv []string
	}{
		{"plain", []string{"ls", "-l"}},
		{"pseudo", []string{"echo", "pseudo"}},
		{"sudoers", []string{"cat", "/etc/sudoers"}},
		{"su-do", []string{"echo", "su-do"}},
		{"visudo", []string{"visudo", "-c"}},
		{"suffix", []string{"sudo_wrapper"}},
		{"flag", []string{"tool", "--sudo"}},
		{"dotted", []string{"sudo.real"}},
		{"longer words", []string{"sh", "-c", "summary subsudo dosas run00 pkexec2 issue"}},
		{"capitalised", []string{"echo", "SUDO", "Su"}},
		{"pseudo-terminal in shell", []string{"sh", "-c", "echo pseudo-terminal && ls"}},
		{"sudoers path in shell", []string{"sh", "-c", "grep x /etc/sudoers.d/y | wc -l"}},
		{"directory named sudo in the middle", []string{"ls", "/opt/sudo/bin/tool"}},
	}
	for _, tc := range allowed {
		t.Run("allowed/"+tc.name, func(t *testing.T) {
			assert.NoError(t, command.CheckEscalation(tc.argv))
		})
	}
}

// TestEscalationRefusedWithoutSpawning runs every form through Execute
// with a PATH whose sudo, doas, su, pkexec and run0 create the probe file,
// and argv that would create it too: the probe proves nothing ran.
func TestEscalationRefusedWithoutSpawning(t *testing.T) {
	bin := t.TempDir()
	for _, w := range []string{"sudo", "doas", "su", "pkexec", "run0"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, w), []byte("#!/bin/sh\ntouch PROBE\n\"$@\"\n"), 0o755))
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	f := newFixture(t)
	probe := filepath.Join(f.root, "PROBE")

	// The fake programs work: run under another name, they make the probe.
	require.NoError(t, os.Link(filepath.Join(bin, "sudo"), filepath.Join(bin, "notsudo")))
	r := f.run(t, call(t, "w", argv("notsudo", "true")))
	require.Equal(t, 0, r.ExitCode, string(r.Stderr))
	require.FileExists(t, probe)
	require.NoError(t, os.Remove(probe))
	before := f.ledgerEntries(t)

	for _, a := range [][]string{
		{"sudo", "true"},
		{"doas", "true"},
		{"su"},
		{"pkexec", "true"},
		{"run0", "true"},
		{filepath.Join(bin, "sudo"), "true"},
		{"env", "sudo", "true"},
		{"env", "-i", "PATH=" + bin, "doas", "true"},
		{"find", ".", "-maxdepth", "0", "-exec", "sudo", "true", ";"},
		{"sh", "-c", "touch PROBE; sudo true"},
		{"sh", "-c", "touch PROBE && sudo rm -rf /"},
		{"sh", "-c", "touch PROBE || doas true"},
		{"sh", "-c", "touch PROBE | su -c true"},
		{"sh", "-c", "touch PROBE & pkexec true"},
		{"sh", "-c", "touch PROBE\nrun0 true"},
		{"bash", "-lc", "touch PROBE; echo $(doas id)"},
		{"sh", "-c", "touch PROBE; echo `sudo id`"},
		{"sh", "-c", "touch PROBE; (sudo true)"},
		{"sh", "-c", "touch PROBE; { sudo true; }"},
		{"sh", "-c", "touch PROBE; " + filepath.Join(bin, "sudo") + " true"},
		{"sh", "-c", `touch PROBE; "sudo" true`},
		{"sh", "-c", `touch PROBE; 'su'`},
		{"sh", "-c", `touch PROBE; su""do true`},
		{"sh", "-c", `touch PROBE; s\udo true`},
		{"sh", "-c", "touch PROBE;FOO=1 sudo true"},
		{"sh", "-c", "touch PROBE >/dev/null;sudo true"},
		{"sh", "-c", "touch PROBE; if true; then doas true; fi"},
		{"sh", "-c", "touch PROBE", "sudo"},
		{"sh", "-c", "touch PROBE; x=sudo; $x true"},
	} {
		t.Run(a[len(a)-1], func(t *testing.T) {
			_, err := f.e.Execute(context.Background(), call(t, "w", argv(a...)))
			require.Error(t, err)
			assert.Equal(t, events.CodePrivilegeEscalation, events.CodeOf(err), "%v", err)
			assert.NoFileExists(t, probe, "argv %q ran", a)
			assert.Equal(t, before, f.ledgerEntries(t), "no attempt recorded")
			// The gate's operand check refuses it first.
			_, err = f.e.Operands(context.Background(), "w", mustJSON(t, argv(a...)))
			assert.Equal(t, events.CodePrivilegeEscalation, events.CodeOf(err), "%v", err)
		})
	}
}
