package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type (
	snapshotSaveOut struct {
		File  string `json:"file"`
		Bytes int64  `json:"bytes"`
		Index uint64 `json:"index"`
		Token uint64 `json:"token"`
	}
	snapshotStatusOut struct {
		Checksum string `json:"checksum"`
		Token    uint64 `json:"token"`
		Index    uint64 `json:"index"`
		State    struct {
			Sessions   int   `json:"sessions"`
			KVKeys     int   `json:"kv_keys"`
			Tombstones int   `json:"kv_tombstones"`
			StateBytes int64 `json:"state_bytes"`
		} `json:"state"`
	}
	snapshotRestoreOut struct {
		BackupToken uint64 `json:"backup_token"`
		TokenFloor  uint64 `json:"token_floor"`
	}
)

// TestCLISnapshotSaveRestore: a backup saved from a running server and
// restored after the server went on granting and was lost never reissues a
// token the lost server issued, nor one a resource accepted; status
// verifies the checksum; restore refuses a damaged file, a data dir in use
// and a floor at or below the backup's token.
func TestCLISnapshotSaveRestore(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	a := ok[holdingOut](t, srv.cli(t, "acquire", "job", "--ttl", "30s", "-o", "json"))
	ok[kvPutOut](t, srv.cli(t, "kv", "put", "k", "v1", "--token", fmt.Sprint(a.Token), "-o", "json"))
	ok[kvPutOut](t, srv.cli(t, "kv", "put", "gone", "x", "--token", fmt.Sprint(a.Token), "-o", "json"))
	ok[kvPutOut](t, srv.cli(t, "kv", "delete", "gone", "--token", fmt.Sprint(a.Token), "-o", "json"))

	backup := filepath.Join(t.TempDir(), "leasehold.snap")
	saved := ok[snapshotSaveOut](t, srv.cli(t, "snapshot", "save", backup, "-o", "json"))
	if saved.Token != a.Token || saved.Bytes == 0 || saved.Index == 0 {
		t.Fatalf("snapshot save = %+v, want token %d", saved, a.Token)
	}
	st := ok[snapshotStatusOut](t, cli(t, "snapshot", "status", backup, "-o", "json"))
	if st.Checksum != "ok" || st.Token != a.Token || st.Index != saved.Index || st.State.Sessions != 1 || st.State.KVKeys != 1 || st.State.Tombstones != 1 || st.State.StateBytes == 0 {
		t.Fatalf("snapshot status = %+v", st)
	}

	// The server goes on: more grants, and a resource accepts the newest.
	var newest uint64
	for i := range 5 {
		newest = ok[holdingOut](t, srv.cli(t, "acquire", fmt.Sprint("later-", i), "--ttl", "30s", "-o", "json")).Token
	}
	ok[kvPutOut](t, srv.cli(t, "kv", "put", "k", "v2", "--token", fmt.Sprint(newest), "-o", "json"))
	srv.Kill(t) // lost

	// Refusals first: a damaged copy, a data dir in use, a floor too low.
	data, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged.snap")
	data[len(data)/2] ^= 1
	if err := os.WriteFile(damaged, data, 0o600); err != nil {
		t.Fatal(err)
	}
	fails(t, cli(t, "snapshot", "status", damaged, "-o", "json"), "invalid-argument", 2)
	fails(t, cli(t, "snapshot", "restore", damaged, "--data", filepath.Join(t.TempDir(), "d"), "-o", "json"), "invalid-argument", 2)
	fails(t, cli(t, "snapshot", "restore", backup, "-o", "json"), "invalid-argument", 2)
	fails(t, cli(t, "snapshot", "restore", backup, "--data", srv.Dir, "-o", "json"), "invalid-argument", 2)
	low := filepath.Join(t.TempDir(), "low")
	fails(t, cli(t, "snapshot", "restore", backup, "--data", low, "--token-floor", fmt.Sprint(a.Token), "-o", "json"), "invalid-argument", 2)

	dir := filepath.Join(t.TempDir(), "restored")
	res := ok[snapshotRestoreOut](t, cli(t, "snapshot", "restore", backup, "--data", dir, "-o", "json"))
	if res.BackupToken != a.Token || res.TokenFloor <= newest {
		t.Fatalf("restore = %+v; want the backup's token %d and a floor above %d", res, a.Token, newest)
	}
	srv = startServe(t, dir)
	// The backup's holders are gone: they must acquire again.
	if st := srv.status(t, "job"); st.Holder != nil {
		t.Fatalf("the lost server's holding survived the restore: %+v", st.Holder)
	}
	got := ok[kvGetOut](t, srv.cli(t, "kv", "get", "k", "-o", "json"))
	if got.Value != "v1" || got.Token != a.Token {
		t.Fatalf("kv get k = %+v, want the backup's v1 at token %d", got, a.Token)
	}
	fails(t, srv.cli(t, "kv", "get", "gone", "-o", "json"), "not-found", 14)
	fails(t, srv.cli(t, "kv", "put", "gone", "late", "--token", fmt.Sprint(a.Token), "--strict", "-o", "json"), "stale-token", 4)
	b := ok[holdingOut](t, srv.cli(t, "acquire", "job", "--ttl", "30s", "-o", "json"))
	if b.Token <= newest {
		t.Fatalf("the restored server granted token %d; the lost one had issued (and a resource accepted) up to %d", b.Token, newest)
	}
	explicit := filepath.Join(t.TempDir(), "explicit")
	res = ok[snapshotRestoreOut](t, cli(t, "snapshot", "restore", backup, "--data", explicit, "--token-floor", "1000000", "-o", "json"))
	if res.TokenFloor != 1_000_000 {
		t.Fatalf("restore --token-floor 1000000 set floor %d", res.TokenFloor)
	}
}

// TestCLIKVDelete: kv delete removes the value and keeps the fence.
func TestCLIKVDelete(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	a := ok[holdingOut](t, srv.cli(t, "acquire", "x", "--ttl", "30s", "-o", "json"))
	b := ok[holdingOut](t, srv.cli(t, "acquire", "y", "--ttl", "30s", "-o", "json"))
	ok[kvPutOut](t, srv.cli(t, "kv", "put", "k", "v", "--token", fmt.Sprint(a.Token), "-o", "json"))
	fails(t, srv.cli(t, "kv", "delete", "k", "-o", "json"), "invalid-argument", 2)
	fails(t, srv.cli(t, "kv", "delete", "nope", "--token", fmt.Sprint(a.Token), "-o", "json"), "not-found", 14)
	del := ok[kvPutOut](t, srv.cli(t, "kv", "delete", "k", "--token", fmt.Sprint(b.Token), "-o", "json"))
	if del.Status != "deleted" || del.Token != b.Token {
		t.Fatalf("kv delete = %+v", del)
	}
	fails(t, srv.cli(t, "kv", "get", "k", "-o", "json"), "not-found", 14)
	e := fails(t, srv.cli(t, "kv", "put", "k", "late", "--token", fmt.Sprint(a.Token), "-o", "json"), "stale-token", 4)
	if e.Error.LastToken != b.Token {
		t.Fatalf("stale-token after delete names last token %d, want %d", e.Error.LastToken, b.Token)
	}
}

// TestCLIHandCopiedDataDir: an old copy of a data dir, started by hand after
// the original server went on granting (and restarting) and was lost,
// grants no token the original issued and no token a resource accepted:
// its first leadership raises the counter before any grant.
func TestCLIHandCopiedDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir)
	a := ok[holdingOut](t, srv.cli(t, "acquire", "job", "--ttl", "30s", "-o", "json"))
	ok[kvPutOut](t, srv.cli(t, "kv", "put", "k", "v1", "--token", fmt.Sprint(a.Token), "-o", "json"))
	srv.Stop(t)
	old := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(old, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}

	srv = startServeAt(t, dir, srv.Addr)
	var newest uint64
	for i := range 3 {
		newest = ok[holdingOut](t, srv.cli(t, "acquire", fmt.Sprint("later-", i), "--ttl", "30s", "-o", "json")).Token
	}
	ok[kvPutOut](t, srv.cli(t, "kv", "put", "k", "v2", "--token", fmt.Sprint(newest), "-o", "json"))
	srv.Kill(t) // lost

	srv = startServe(t, old)
	if got := ok[kvGetOut](t, srv.cli(t, "kv", "get", "k", "-o", "json")); got.Value != "v1" {
		t.Fatalf("the copy's kv k = %+v, want the old v1", got)
	}
	b := ok[holdingOut](t, srv.cli(t, "acquire", "next", "--ttl", "30s", "-o", "json"))
	if b.Token <= newest {
		t.Fatalf("the old copy granted token %d; the lost original had issued (and a resource accepted) up to %d", b.Token, newest)
	}
	if !strings.Contains(srv.log.String(), "raised the token counter after a restart from existing state") {
		t.Error("the copy's log does not say it raised the token counter")
	}
}
