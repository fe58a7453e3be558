package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/certs"
)

// newCertsCmd returns `leasehold certs`: a local CA for TLS between clients and nodes.
func newCertsCmd(g *globals) *cobra.Command {
	var o certs.Options
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create a local CA and node and client certificates for TLS",
		Long: `Create a local certificate authority and certificates signed by it, for development and
small deployments. Files go to --certs-dir (env LEASEHOLD_CERTS_DIR, default ./leasehold-certs,
created with mode 0700):

  ca.crt, ca.key                      create-ca
  node.crt, node.key                  create-node --host H [--host H...]  (server and client auth)
  client.NAME.crt, client.NAME.key    create-client NAME                  (CN=NAME, client auth)

Keys are ECDSA P-256 (default) or Ed25519 (--key-type), PKCS#8 PEM, mode 0600. Existing files
are never replaced unless --overwrite is given; a refused command writes nothing.

create-sequencer-key writes the cluster's Ed25519 signing keys for signed sequencers
(sequencer.key, 0600: give it to every node with serve --sequencer-key) and their public key set
(sequencer-keys.json: what resources pin, e.g. gateway --keyset).`,
		Example: `  leasehold certs create-ca
  leasehold certs create-node --host localhost --host 127.0.0.1
  leasehold certs create-client worker-A
  leasehold serve --cert leasehold-certs/node.crt --key leasehold-certs/node.key --client-ca leasehold-certs/ca.crt
  leasehold --endpoints https://127.0.0.1:7420 --cacert leasehold-certs/ca.crt \
      --cert leasehold-certs/client.worker-A.crt --key leasehold-certs/client.worker-A.key ls`,
	}
	def := os.Getenv("LEASEHOLD_CERTS_DIR")
	if def == "" {
		def = "./leasehold-certs"
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.Dir, "certs-dir", def, "directory of ca.crt/ca.key and the certificates (env LEASEHOLD_CERTS_DIR)")
	pf.StringVar(&o.KeyType, "key-type", certs.KeyECDSA, `key algorithm: "ecdsa" (P-256) or "ed25519"`)
	pf.DurationVar(&o.Lifetime, "lifetime", 0, fmt.Sprintf("validity of the certificate (default %v for the CA, %v otherwise)",
		certs.DefaultCALifetime, certs.DefaultCertLifetime))
	pf.BoolVar(&o.Overwrite, "overwrite", false, "replace existing files")

	done := func(cmd *cobra.Command, files ...string) {
		paths := make([]string, len(files))
		for i, f := range files {
			paths[i] = filepath.Join(o.Dir, f)
		}
		emit(cmd, g, map[string][]string{"files": paths}, strings.Join(paths, "\n"))
	}
	var hosts []string
	createNode := &cobra.Command{
		Use:   "create-node --host HOST [--host HOST...]",
		Short: "Create node.crt/node.key for the API (and peer) addresses of a node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := certsErr(certs.CreateNode(o, hosts)); err != nil {
				return err
			}
			done(cmd, certs.NodeCert, certs.NodeKey)
			return nil
		},
	}
	createNode.Flags().StringArrayVar(&hosts, "host", nil, "DNS name or IP address the node is reached at (repeatable, at least one)")
	var clusterID, keyID string
	var rotate bool
	createSeqKey := &cobra.Command{
		Use:   "create-sequencer-key --cluster-id ID [--key-id ID] [--rotate]",
		Short: "Create the cluster's sequencer signing key (sequencer.key) and its public key set (sequencer-keys.json)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := certsErr(certs.CreateSequencerKey(o, clusterID, keyID, rotate)); err != nil {
				return err
			}
			done(cmd, certs.SequencerKey, certs.SequencerKeySet)
			return nil
		},
	}
	createSeqKey.Flags().StringVar(&clusterID, "cluster-id", "", "the cluster's id, carried and checked in every sequencer (required unless --rotate)")
	createSeqKey.Flags().StringVar(&keyID, "key-id", "k1", "id of the new key (a new one for each rotation)")
	createSeqKey.Flags().BoolVar(&rotate, "rotate", false, "add the key to an existing sequencer.key and sign with it; the old keys stay in the key set")
	cmd.AddCommand(
		&cobra.Command{
			Use:   "create-ca",
			Short: "Create the CA: ca.crt and ca.key",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if err := certsErr(certs.CreateCA(o)); err != nil {
					return err
				}
				done(cmd, certs.CACert, certs.CAKey)
				return nil
			},
		},
		createNode, createSeqKey,
		&cobra.Command{
			Use:   "create-client NAME",
			Short: "Create client.NAME.crt/key with CN=NAME, the principal NAME",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := certsErr(certs.CreateClient(o, args[0])); err != nil {
					return err
				}
				done(cmd, certs.ClientCert(args[0]), certs.ClientKey(args[0]))
				return nil
			},
		},
	)
	return cmd
}

// certsErr maps the certs package's refusals to invalid-argument (exit code and JSON code).
func certsErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, certs.ErrExists) || errors.Is(err, certs.ErrInvalid) || errors.Is(err, certs.ErrNoCA) {
		return usageErr("%v", err)
	}
	return err
}
