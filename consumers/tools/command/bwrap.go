package command

// bwrapArgs are the bubblewrap options a call in dir runs under, before
// "--" and the command:
//
//	--ro-bind / /        the whole file system, read-only
//	--dev /dev           a minimal /dev (null, zero, random, tty, pts, ...)
//	--proc /proc         a procfs of the new pid namespace
//	--tmpfs /tmp         a private, empty /tmp
//	--bind DIR DIR       the workspace root (or the call's temporary
//	                     directory), read-write, at its own path
//	--chdir DIR          the working directory
//	--unshare-all        new user (if possible), ipc, pid, net, uts and
//	                     cgroup (if possible) namespaces: no network but
//	                     a loopback device of its own, no view of other
//	                     processes
//	--die-with-parent    SIGKILL to the command when bwrap dies
//	--new-session        a new session: no access to a controlling
//	                     terminal (TIOCSTI)
//
// With a pid namespace the command's processes all die with it, so
// killing bwrap's process group, or bwrap itself, ends every one of them.
func bwrapArgs(dir string) []string {
	return []string{
		"--ro-bind", "/", "/",
		"--dev", "/dev",
		"--proc", "/proc",
		"--tmpfs", "/tmp",
		"--bind", dir, dir,
		"--chdir", dir,
		"--unshare-all",
		"--die-with-parent",
		"--new-session",
	}
}
