package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/api/leaseholdv1/leaseholdv1connect"
	"github.com/leasehold/leasehold/client"
)

// authFlags are the client commands' credential flags (global).
type authFlags struct {
	tokenFile      string
	nodeSecretFile string
}

func (f *authFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.tokenFile, "auth-token-file", os.Getenv("LEASEHOLD_AUTH_TOKEN_FILE"), "file holding a bearer token (leasehold auth token create); env LEASEHOLD_AUTH_TOKEN_FILE, or the token itself in LEASEHOLD_AUTH_TOKEN")
	// serve has a flag of this name of its own: the secret it checks.
	fs.StringVar(&f.nodeSecretFile, "node-secret-file", os.Getenv("LEASEHOLD_NODE_SECRET_FILE"), "file holding the cluster's node secret (serve --node-secret-file): call as a node, to bootstrap auth without client certificates; sent only over TLS or to a loopback address; env LEASEHOLD_NODE_SECRET_FILE")
}

// dialOptions adds client.WithBearerToken and client.WithNodeSecret when
// they are configured.
func (f *authFlags) dialOptions(opts []client.DialOption) ([]client.DialOption, error) {
	tok := os.Getenv("LEASEHOLD_AUTH_TOKEN")
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, usageErr("--auth-token-file: %v", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	if tok != "" {
		opts = append(opts, client.WithBearerToken(tok))
	}
	secret, err := readNodeSecret(f.nodeSecretFile)
	if err != nil {
		return nil, err
	}
	if secret != "" {
		opts = append(opts, client.WithNodeSecret(secret))
	}
	return opts, nil
}

// authCall runs f with the auth service of the first endpoint.
func (g *globals) authCall(cmd *cobra.Command, f func(ctx context.Context, ac authClient) error) error {
	return g.do(cmd, func(ctx context.Context, c *client.Client) error {
		ac, err := c.AuthService()
		if err != nil {
			return err
		}
		return f(ctx, ac)
	})
}

type authClient = leaseholdv1connect.AuthServiceClient

// apiErr maps an RPC error to a leasehold error.
func apiErr(err error) error {
	if err == nil {
		return nil
	}
	return api.FromError(err)
}

func newAuthCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "auth", Short: "Authentication and authorization: the switch, tokens, policies",
		Long: `Manage who may do what (see docs/operating/security.md).

Principals are the CN of a client certificate (leasehold certs create-client NAME) or the
principal of a bearer token (auth token create NAME; give it with --auth-token-file or
LEASEHOLD_AUTH_TOKEN). Policies grant lock, read, kv-read, kv-write and admin on name
prefixes. Once enabled, everything not granted is denied (permission-denied).

Bootstrap: start every node with --admin NAME and run auth enable as NAME proven by its
client certificate (--cert/--key, no token). While auth is off, tokens and policies are
minted the same way; a bearer token proves nothing then (anyone may mint one), so it can
neither enable auth nor mint while auth is off (permission-denied).`}
	setEnabled := func(on bool) func(cmd *cobra.Command, _ []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			return g.authCall(cmd, func(ctx context.Context, ac authClient) error {
				res, err := ac.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: on}))
				if err != nil {
					return apiErr(err)
				}
				emit(cmd, g, map[string]any{"enabled": res.Msg.GetEnabled()}, fmt.Sprintf("auth enabled: %v\n", res.Msg.GetEnabled()))
				return nil
			})
		}
	}
	enable := &cobra.Command{Use: "enable", Short: "Turn authorization on (default deny)", Args: cobra.NoArgs, RunE: setEnabled(true)}
	disable := &cobra.Command{Use: "disable", Short: "Turn authorization off (everyone may do everything)", Args: cobra.NoArgs, RunE: setEnabled(false)}
	status := &cobra.Command{Use: "status", Short: "Show whether auth is on and who you are", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.authCall(cmd, func(ctx context.Context, ac authClient) error {
				res, err := ac.Status(ctx, connect.NewRequest(&pb.AuthStatusRequest{}))
				if err != nil {
					return apiErr(err)
				}
				m := res.Msg
				who := m.GetPrincipal()
				if who == "" {
					who = "anonymous"
				}
				emit(cmd, g, map[string]any{"enabled": m.GetEnabled(), "principal": m.GetPrincipal(), "roles": m.GetRoles(), "policies": m.GetPolicies(), "tokens": m.GetTokens()},
					fmt.Sprintf("enabled: %v\nprincipal: %s\nroles: %s\npolicies: %d\ntokens: %d\n", m.GetEnabled(), who, strings.Join(m.GetRoles(), ","), m.GetPolicies(), m.GetTokens()))
				return nil
			})
		}}
	cmd.AddCommand(enable, disable, status, newAuthTokenCmd(g), newAuthPolicyCmd(g))
	return cmd
}

func newAuthTokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Create, list and revoke bearer tokens"}
	create := &cobra.Command{Use: "create PRINCIPAL", Short: "Create a bearer token for PRINCIPAL and print it once (only its SHA-256 is stored)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.authCall(cmd, func(ctx context.Context, ac authClient) error {
				res, err := ac.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: args[0]}))
				if err != nil {
					return apiErr(err)
				}
				m := res.Msg
				emit(cmd, g, map[string]any{"id": m.GetId(), "principal": m.GetPrincipal(), "token": m.GetToken()}, m.GetToken()+"\n")
				return nil
			})
		}}
	revoke := &cobra.Command{Use: "revoke ID", Short: "Revoke a token by its id (auth token list)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.authCall(cmd, func(ctx context.Context, ac authClient) error {
				if _, err := ac.RevokeToken(ctx, connect.NewRequest(&pb.RevokeTokenRequest{Id: args[0]})); err != nil {
					return apiErr(err)
				}
				emit(cmd, g, map[string]any{"revoked": args[0]}, "revoked "+args[0]+"\n")
				return nil
			})
		}}
	list := &cobra.Command{Use: "list", Short: "List token ids and principals (never the tokens)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.authCall(cmd, func(ctx context.Context, ac authClient) error {
				res, err := ac.ListTokens(ctx, connect.NewRequest(&pb.ListTokensRequest{}))
				if err != nil {
					return apiErr(err)
				}
				out := []map[string]any{}
				var b strings.Builder
				fmt.Fprintf(&b, "%-16s %s\n", "ID", "PRINCIPAL")
				for _, t := range res.Msg.GetTokens() {
					out = append(out, map[string]any{"id": t.GetId(), "principal": t.GetPrincipal(), "created_unix_ms": t.GetCreatedUnixMs()})
					fmt.Fprintf(&b, "%-16s %s\n", t.GetId(), t.GetPrincipal())
				}
				emit(cmd, g, map[string]any{"tokens": out}, b.String())
				return nil
			})
		}}
	cmd.AddCommand(create, revoke, list)
	return cmd
}

func newAuthPolicyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Set, list and delete policies"}
	var principals, allow, prefixes []string
	set := &cobra.Command{Use: "set NAME", Short: "Create or replace policy NAME",
		Example: `  leasehold auth policy set reports --principal alice --allow lock,read --prefix report:`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.authCall(cmd, func(ctx context.Context, ac authClient) error {
				p := &pb.Policy{Name: args[0], Principals: principals, Permissions: allow, Prefixes: prefixes}
				if _, err := ac.SetPolicy(ctx, connect.NewRequest(&pb.SetPolicyRequest{Policy: p})); err != nil {
					return apiErr(err)
				}
				emit(cmd, g, policyJSON(p), "policy "+args[0]+" set\n")
				return nil
			})
		}}
	set.Flags().StringSliceVar(&principals, "principal", nil, "principal the policy applies to (repeatable; * = any authenticated principal)")
	set.Flags().StringSliceVar(&allow, "allow", nil, "permissions: lock, read, kv-read, kv-write, admin")
	set.Flags().StringSliceVar(&prefixes, "prefix", nil, "name/key prefix the permissions cover (repeatable; none = every name)")
	list := &cobra.Command{Use: "list", Short: "List policies", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.authCall(cmd, func(ctx context.Context, ac authClient) error {
				res, err := ac.ListPolicies(ctx, connect.NewRequest(&pb.ListPoliciesRequest{}))
				if err != nil {
					return apiErr(err)
				}
				out := []map[string]any{}
				var b strings.Builder
				fmt.Fprintf(&b, "%-16s %-20s %-28s %s\n", "NAME", "PRINCIPALS", "ALLOW", "PREFIXES")
				for _, p := range res.Msg.GetPolicies() {
					out = append(out, policyJSON(p))
					fmt.Fprintf(&b, "%-16s %-20s %-28s %s\n", p.GetName(), strings.Join(p.GetPrincipals(), ","), strings.Join(p.GetPermissions(), ","), strings.Join(p.GetPrefixes(), ","))
				}
				emit(cmd, g, map[string]any{"policies": out}, b.String())
				return nil
			})
		}}
	del := &cobra.Command{Use: "delete NAME", Short: "Delete policy NAME", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.authCall(cmd, func(ctx context.Context, ac authClient) error {
				if _, err := ac.DeletePolicy(ctx, connect.NewRequest(&pb.DeletePolicyRequest{Name: args[0]})); err != nil {
					return apiErr(err)
				}
				emit(cmd, g, map[string]any{"deleted": args[0]}, "policy "+args[0]+" deleted\n")
				return nil
			})
		}}
	cmd.AddCommand(set, list, del)
	return cmd
}

func policyJSON(p *pb.Policy) map[string]any {
	return map[string]any{"name": p.GetName(), "principals": p.GetPrincipals(), "allow": p.GetPermissions(), "prefixes": p.GetPrefixes()}
}

// readNodeSecret reads a --node-secret-file ("" without it).
func readNodeSecret(file string) (string, error) {
	return readSecretFile("--node-secret-file", file)
}

// readSecretFile reads the secret in the file of flag ("" without it): at
// least 32 bytes once trimmed.
func readSecretFile(flag, file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usageErr("%s: %v", flag, err)
	}
	sec := strings.TrimSpace(string(b))
	if len(sec) < 32 {
		return "", usageErr("%s: the secret is %d bytes; want at least 32 (e.g. openssl rand -hex 32)", flag, len(sec))
	}
	return sec, nil
}
