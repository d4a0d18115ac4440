package command

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// spawn is one process run: the command, its output pipes and captures.
type spawn struct {
	cmd      *exec.Cmd
	out, err capture
}

// capture keeps the first max bytes written to it and counts the rest.
type capture struct {
	buf       []byte
	max       int
	truncated bool
}

// drain reads r to its end or until it is closed, keeping what fits.
func (c *capture) drain(r *os.File) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			keep := min(n, c.max-len(c.buf))
			c.buf = append(c.buf, chunk[:keep]...)
			if keep < n {
				c.truncated = true
			}
		}
		if err != nil {
			return
		}
	}
}

// env is the child's environment: the allowed variables of Airlock's own.
func (e *Exec) env() []string {
	env := make([]string, 0, len(e.cfg.EnvAllow))
	for _, name := range e.cfg.EnvAllow {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// lookPath resolves argv[0] the way the child's execvp would, but before
// anything is spawned: a name with a slash is taken relative to dir, a
// bare name is searched in the PATH of env (absolute entries only: a
// relative entry would resolve inside the workspace).
func lookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, executable(p)
	}
	var pathList string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathList = v
		}
	}
	for _, d := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", errors.New("argv[0] is not found in the child's PATH")
}

// startError describes why argv[0] could not be run without naming it or
// its path: the message goes into the op's failed event.
func startError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	return "argv[0]: " + err.Error()
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return &fs.PathError{Op: "exec", Path: p, Err: fs.ErrPermission}
	}
	return nil
}

// command builds the process for argv in dir: argv directly, or inside
// bubblewrap when configured.
func (e *Exec) command(argv []string, dir string) (*spawn, error) {
	env := e.env()
	path, err := lookPath(argv[0], dir, env)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: dir, Env: env}
	if e.cfg.Bubblewrap != "" {
		args := append([]string{e.cfg.Bubblewrap}, bwrapArgs(dir)...)
		args = append(args, "--", path)
		args = append(args, argv[1:]...)
		cmd = &exec.Cmd{Path: e.cfg.Bubblewrap, Args: args, Dir: dir, Env: env}
	}
	// Its own process group, so the whole group can be killed; SIGKILL
	// if the thread that spawned it dies (see run).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return &spawn{cmd: cmd, out: capture{max: e.cfg.MaxOutput}, err: capture{max: e.cfg.MaxOutput}}, nil
}

// outcome is how a spawned process ended.
type outcome struct {
	timedOut  bool
	cancelled bool
	took      time.Duration
	state     *os.ProcessState
	stray     bool  // output pipes held open past the group's end
	waitErr   error // waiting or reaping failed
}

// run starts s and waits for it: until it exits, the timeout passes (the
// process group is killed) or ctx ends (likewise). Once the process has
// exited whatever remains of its group is killed, so no call leaves
// processes behind in its group. started is called with the pid once the
// process is spawned. An error means nothing was spawned.
func (s *spawn) run(ctx context.Context, timeout time.Duration, started func(pid int)) (outcome, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return outcome{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return outcome{}, err
	}
	s.cmd.Stdout, s.cmd.Stderr = outW, errW

	// Start and wait on one locked OS thread: Pdeathsig fires when the
	// spawning thread exits, so it must live as long as the child.
	startErr := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := s.cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		exited <- waitExited(s.cmd.Process.Pid)
	}()
	err = <-startErr
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return outcome{}, err
	}
	t0 := time.Now()
	pid := s.cmd.Process.Pid
	var readers sync.WaitGroup
	readers.Go(func() { s.out.drain(outR) })
	readers.Go(func() { s.err.drain(errR) })
	started(pid)

	var o outcome
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var waitErr error
	kill := func(flag *bool) {
		select {
		case waitErr = <-exited: // it exited on its own just then
		default:
			*flag = true
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			waitErr = <-exited
		}
	}
	select {
	case waitErr = <-exited:
	case <-timer.C:
		kill(&o.timedOut)
	case <-ctx.Done():
		kill(&o.cancelled)
	}
	o.took = time.Since(t0)
	if waitErr == nil {
		// The leader has exited but is not reaped, so its pid, and with
		// it the group id, cannot be reused yet: killing the group is
		// safe. (Had waitid failed, the pid might be anyone's by now.)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	} else {
		o.waitErr = waitErr
	}

	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(DrainGrace):
		// A process that left the group holds a pipe: stop reading.
		o.stray = true
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	if err := s.cmd.Wait(); s.cmd.ProcessState == nil { // Wait reaps
		o.waitErr = errors.Join(o.waitErr, err)
	}
	o.state = s.cmd.ProcessState
	return o, nil
}

// waitExited blocks until process pid has exited, without reaping it.
func waitExited(pid int) error {
	const pPID = 1
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			return e
		}
		return nil
	}
}

// result turns an outcome and the captured output into the call's result.
func (s *spawn) result(o outcome) Result {
	r := Result{
		TimedOut:        o.timedOut,
		DurationMS:      o.took.Milliseconds(),
		Stdout:          s.out.buf,
		Stderr:          s.err.buf,
		StdoutTruncated: s.out.truncated,
		StderrTruncated: s.err.truncated,
	}
	if r.StdoutTruncated {
		r.Stdout = trimRune(r.Stdout)
	}
	if r.StderrTruncated {
		r.Stderr = trimRune(r.Stderr)
	}
	if o.state == nil {
		r.ExitCode = -1
		return r
	}
	ws, _ := o.state.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		r.ExitCode = -1
		r.Signal = signalName(ws.Signal())
	default:
		r.ExitCode = ws.ExitStatus()
	}
	return r
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT", syscall.SIGALRM: "SIGALRM", syscall.SIGBUS: "SIGBUS",
	syscall.SIGFPE: "SIGFPE", syscall.SIGHUP: "SIGHUP", syscall.SIGILL: "SIGILL",
	syscall.SIGINT: "SIGINT", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGQUIT: "SIGQUIT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGSYS: "SIGSYS",
	syscall.SIGTERM: "SIGTERM", syscall.SIGTRAP: "SIGTRAP", syscall.SIGUSR1: "SIGUSR1",
	syscall.SIGUSR2: "SIGUSR2", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("SIG%d", int(s))
}
