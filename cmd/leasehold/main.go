// Command leasehold is the one binary of leasehold: the server (serve),
// the client commands (acquire, release, run, status, ls, watch, kv,
// cluster), the fencing gateway and the seed-scenario demo.
//
// Flags, environment variables and config are read only here.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root, g := newRootCmd()
	err := root.ExecuteContext(ctx)
	stop()
	os.Exit(finish(root, g, err, os.Args[1:]))
}

// finish prints an error no command printed — cobra's own, returned before
// any RunE: unknown command, bad flags or arguments, a bad -o — as an
// invalid-argument error in the chosen format, and returns the exit status.
func finish(root *cobra.Command, g *globals, err error, args []string) int {
	var ee exitError
	if err != nil && !g.printed && !errors.As(err, &ee) {
		if !isAPIError(err) {
			err = usageErr("%v", err)
		}
		if jsonRequested(args) {
			// Flag parsing may have stopped before -o json.
			g.output = "json"
		}
		printError(root, g, err)
	}
	return exitCode(err)
}

// jsonRequested reports whether args ask for JSON output (-o json and its
// spellings) before a "--".
func jsonRequested(args []string) bool {
	for i, a := range args {
		switch a {
		case "--":
			return false
		case "-o", "--output":
			if i+1 < len(args) && args[i+1] == "json" {
				return true
			}
		case "-ojson", "-o=json", "--output=json":
			return true
		}
	}
	return false
}

// globals are the flags every client command shares.
type globals struct {
	endpoints string
	output    string
	timeout   time.Duration
	tls       clientTLSFlags // --cacert, --cert, --key (tls.go)
	auth      authFlags      // --auth-token-file (auth.go)
	printed   bool           // a command printed its error (see wrapErrors)
}

func newRootCmd() (*cobra.Command, *globals) {
	g := &globals{}
	root := &cobra.Command{
		Use:           "leasehold",
		Short:         "A lock service whose grants carry fencing tokens",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.output != "text" && g.output != "json" {
				return usageErr("-o must be text or json, got %q", g.output)
			}
			return nil
		},
	}
	def := os.Getenv("LEASEHOLD_ENDPOINTS")
	if def == "" {
		def = client.DefaultEndpoint
	}
	root.PersistentFlags().StringVar(&g.endpoints, "endpoints", def, "comma-separated server addresses, host:port or https://host:port (env LEASEHOLD_ENDPOINTS)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	root.PersistentFlags().DurationVar(&g.timeout, "timeout", 15*time.Second, "deadline of each request (waiting in a queue is bounded by --wait instead)")
	g.tls.add(root.PersistentFlags())
	g.auth.add(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	root.AddCommand(
		newServeCmd(g),
		newAcquireCmd(g), newReleaseCmd(g), newRunCmd(g),
		newStatusCmd(g), newLsCmd(g), newWatchCmd(g),
		newKVCmd(g), newClusterCmd(g), newSnapshotCmd(g),
		newDemoCmd(g), newGatewayCmd(g), newCertsCmd(g), newVersionCmd(g),
		newElectCmd(g), newSessionCmd(g), newLockCmd(g),
		newAuthCmd(g),
	)
	root.Version = buildinfo.Get().String()
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetErr(os.Stderr)
	root.SetOut(os.Stdout)
	wrapErrors(root, g)
	return root, g
}

// wrapErrors makes every command print its error in the chosen format
// before returning it, so exitCode only has to pick the status.
func wrapErrors(c *cobra.Command, g *globals) {
	for _, sub := range c.Commands() {
		wrapErrors(sub, g)
	}
	if c.RunE == nil {
		return
	}
	run := c.RunE
	c.RunE = func(cmd *cobra.Command, args []string) error {
		err := run(cmd, args)
		var ee exitError
		if err != nil && !errors.As(err, &ee) {
			printError(cmd, g, err)
			g.printed = true
		}
		return err
	}
}

// exitError carries a child's exit status through (leasehold run).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageErr is an invalid-argument error from flag or argument parsing.
func usageErr(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// Not a leasehold error: internal (1), the call could not even start.
	return api.CodeOf(err).ExitCode()
}

func isAPIError(err error) bool {
	var e *api.Error
	return errors.As(err, &e)
}

type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	LastToken uint64 `json:"last_token,omitempty"`
}

func printError(cmd *cobra.Command, g *globals, err error) {
	e := api.FromError(err)
	msg := errorMessage(err, e.Code)
	if g.output == "json" {
		writeJSON(cmd.OutOrStdout(), errorBody{errorJSON{Code: string(e.Code), Message: msg, LastToken: e.LastToken}})
		return
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "error: %s: %s\n", e.Code, msg)
}

// errorMessage is err's text without the "leasehold: CODE: " a leasehold
// error starts with: the code is printed once, beside it.
func errorMessage(err error, code api.Code) string {
	return strings.Replace(err.Error(), "leasehold: "+string(code)+": ", "", 1)
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// emit prints v as one JSON object, or text as given.
func emit(cmd *cobra.Command, g *globals, v any, text string) {
	if g.output == "json" {
		writeJSON(cmd.OutOrStdout(), v)
		return
	}
	fmt.Fprint(cmd.OutOrStdout(), text)
	if !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(cmd.OutOrStdout())
	}
}

func (g *globals) dial(ctx context.Context) (*client.Client, error) {
	opts, err := g.tls.dialOptions()
	if err != nil {
		return nil, err
	}
	if opts, err = g.auth.dialOptions(opts); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return client.Dial(ctx, g.endpoints, opts...)
}

// do dials the endpoints and runs f with a context bounded by --timeout.
func (g *globals) do(cmd *cobra.Command, f func(ctx context.Context, c *client.Client) error) error {
	c, err := g.dial(cmd.Context())
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	defer cancel()
	return f(ctx, c)
}

// staleFlag adds --stale to a read command.
func staleFlag(cmd *cobra.Command, stale *bool) {
	cmd.Flags().BoolVar(stale, "stale", false, "read this node's applied state without confirming leadership")
}

// readOpts turns --stale into client read options.
func readOpts(stale bool) []client.ReadOption {
	if stale {
		return []client.ReadOption{client.Stale()}
	}
	return nil
}
