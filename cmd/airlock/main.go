package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := execute(ctx)
	stop()
	os.Exit(exitCode(err))
}

// Exit codes, shared by every subcommand.
const (
	exitOK      = 0
	exitFailed  = 1 // failed, rejected or an error
	exitUsage   = 2
	exitPending = 3 // still pending when --wait ran out
	exitDenied  = 4
)

// exitError carries an exit code; its message, if any, is already printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "airlock:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "airlock:", err)
	return exitFailed
}

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// usageArgs makes an argument validator's complaint a usage error.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		return nil
	}
}
