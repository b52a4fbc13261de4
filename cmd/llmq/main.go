// Command llmq turns a message queue into a well-behaved client of
// rate-limited LLM APIs. Each subcommand lives in its own file and registers
// itself with register; main only wires them into the root command.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
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
	}
	for _, newCmd := range subcommands {
		root.AddCommand(newCmd())
	}
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmq:", err)
		os.Exit(1)
	}
}
