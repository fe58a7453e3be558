package raftnode

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// clusterIDFile holds the cluster id in the data dir, one line of hex.
const clusterIDFile = "cluster-id"

// newClusterID returns a random cluster id (128 bits, hex).
func newClusterID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// peersClusterID derives the id of a cluster bootstrapped from a list of
// several voters: every founding member computes the same id from the same
// list without talking to the others (etcd derives its cluster id from the
// initial member list the same way).
func peersClusterID(peers []Peer) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.ID + "=" + p.RaftAddr
	}
	slices.Sort(parts)
	sum := sha256.Sum256([]byte("leasehold-cluster\x00" + strings.Join(parts, ",")))
	return hex.EncodeToString(sum[:16])
}

// validClusterID reports whether id looks like a cluster id.
func validClusterID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// readClusterID returns the id stored in dir, or "" when there is none.
func readClusterID(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, clusterIDFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("raftnode: read cluster id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if !validClusterID(id) {
		return "", fmt.Errorf("raftnode: %s holds %q, not a cluster id", filepath.Join(dir, clusterIDFile), id)
	}
	return id, nil
}

// writeClusterID stores id in dir durably: a temporary file, fsync'd,
// renamed over the old one, and the directory fsync'd.
func writeClusterID(dir, id string) error {
	tmp, err := os.CreateTemp(dir, clusterIDFile+".tmp*")
	if err != nil {
		return fmt.Errorf("raftnode: write cluster id: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.WriteString(id + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, clusterIDFile))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("raftnode: write cluster id: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (c Config) standalone() bool { return c.RaftAddr == "" && c.Transport == nil }

// identity decides, before raft starts, the node's cluster id and whether
// it bootstraps a new cluster:
//
//	state in the dir   the stored id (checked against ClusterID when set)
//	ForceNewCluster    (needs state) a new random id, see forceNewCluster
//	Join               the id learnt from the cluster joined (ClusterID)
//	Bootstrap, 2+      the id derived from the list (peersClusterID); bootstrap
//	                   once every voter of the list answered that the
//	                   cluster was never formed (found.go)
//	Bootstrap of one,
//	or standalone      a random id; bootstrap
//	otherwise          ErrNoState
func (c Config) identity(existing bool, stored string) (id string, bootstrap bool, err error) {
	switch {
	case existing && stored == "" && c.standalone():
		return newClusterID(), false, nil // a data dir from before cluster ids
	case existing && stored == "":
		return "", false, fmt.Errorf("%w: %s holds Raft state but no %s file", ErrClusterMismatch, c.DataDir, clusterIDFile)
	case existing && c.ClusterID != "" && c.ClusterID != stored:
		return "", false, fmt.Errorf("%w: the data dir %s belongs to cluster %s, not to %s", ErrClusterMismatch, c.DataDir, stored, c.ClusterID)
	case existing && c.ForceNewCluster:
		return newClusterID(), false, nil
	case existing:
		return stored, false, nil
	case c.ForceNewCluster:
		return "", false, fmt.Errorf("%w: %s: there is nothing to recover a cluster from", ErrNoState, c.DataDir)
	case c.Join && c.ClusterID == "":
		return "", false, errors.New("raftnode: joining a cluster needs its cluster id")
	case c.Join:
		return c.ClusterID, false, nil
	case len(c.Bootstrap) > 1:
		return peersClusterID(c.Bootstrap), true, nil
	case len(c.Bootstrap) == 1 || c.standalone():
		if stored != "" {
			return stored, true, nil
		}
		return newClusterID(), true, nil
	}
	return "", false, fmt.Errorf("%w %s: start a new cluster with a bootstrap list, or join a running one", ErrNoState, c.DataDir)
}

// HasState reports whether dir holds Raft state (a log, a term or a
// snapshot) from an earlier start.
func HasState(dir string) (bool, error) {
	if !exists(filepath.Join(dir, "raft.db")) && !exists(filepath.Join(dir, "wal")) {
		snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
		return len(snaps) > 0, nil
	}
	store, err := openStore(dir, hclog.NewNullLogger())
	if err != nil {
		return false, err
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		return false, fmt.Errorf("raftnode: snapshot store: %w", err)
	}
	return raft.HasExistingState(store, store, snaps)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// probeTimeout bounds each peer's answer to a founding probe.
const probeTimeout = 2 * time.Second
