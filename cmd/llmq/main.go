// Command llmq turns a message queue into a well-behaved client of
// rate-limited LLM APIs. Each subcommand lives in its own file and registers
// itself with register; main only wires them into the root command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmq/llmq/internal/tracing"
)

// subcommands holds the constructors registered by each subcommand's file.
var subcommands []func() *cobra.Command

// register adds a subcommand constructor; called from init in each file.
func register(newCmd func() *cobra.Command) { subcommands = append(subcommands, newCmd) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "llmq",
		Short:         "Pull LLM jobs from Kafka or RabbitMQ at exactly the rate the provider quota allows",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	for _, newCmd := range subcommands {
		root.AddCommand(newCmd())
	}
	withUsageOnArgErrors(root)
	return root
}

// withUsageOnArgErrors makes every command's argument error end with its
// usage line: cobra's "accepts 1 arg(s), received 0" alone does not say
// what the argument is.
func withUsageOnArgErrors(cmd *cobra.Command) {
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return fmt.Errorf("%w\nusage: %s", err, c.UseLine())
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		withUsageOnArgErrors(sub)
	}
}

// version is the binary's module version and VCS revision, as the Go
// toolchain stamped them.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			v += " commit " + s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			v += " (modified)"
		}
	}
	return v + " " + info.GoVersion
}

// signalError is the cause of the command context's end when a signal
// interrupted the process.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "interrupted by " + e.sig.String() }

// exitError is an error with its own exit status: a command interrupted
// before the end of its work exits 128 + the signal's number (130 for
// Ctrl-C), as shells do.
type exitError struct {
	err  error
	code int
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// interrupted returns the error of a command that stopped its work because
// ctx ended: exit status 128 + the signal's number (130 when ctx ended
// without a signal, as Ctrl-C does).
func interrupted(ctx context.Context) error {
	code := 130
	var se signalError
	if errors.As(context.Cause(ctx), &se) {
		if s, ok := se.sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
	}
	return &exitError{err: context.Cause(ctx), code: code}
}

// execute runs the command line args on ctx and returns the exit status,
// printing the error (if any) on stderr.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := traced(ctx, args, func() error { return root.ExecuteContext(ctx) })
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "llmq:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// traced runs run with tracing on when the OTEL_* environment asks for it
// (internal/tracing), as service llmq-<subcommand>, and flushes the spans
// after it.
func traced(ctx context.Context, args []string, run func() error) error {
	service := "llmq"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		service += "-" + args[0]
	}
	shutdown, err := tracing.Setup(ctx, service)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	err = run()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := shutdown(sctx); serr != nil {
		return errors.Join(err, fmt.Errorf("tracing: %w", serr))
	}
	return err
}

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		cancel(signalError{<-sigs})
		// A second signal stops at once.
		<-sigs
		os.Exit(130)
	}()
	os.Exit(execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// plural is "1 job", "2 jobs": n and the noun that agrees with it.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
