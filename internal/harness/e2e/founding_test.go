package e2e

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

type grantOut struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
}

type kvOut struct {
	Value string `json:"value"`
	Token uint64 `json:"token"`
}

// bootList is the --bootstrap list of procs.
func bootList(procs []*proc) string {
	var boot []string
	for _, p := range procs {
		boot = append(boot, p.id+"="+p.raft)
	}
	return strings.Join(boot, ",")
}

// wantAcked checks, through endpoint, that the write of "k" and the
// grant of "acked" are still there.
func wantAcked(t *testing.T, endpoint string, grant grantOut) {
	t.Helper()
	var kv kvOut
	cli(t, &kv, "kv", "get", "k", "--endpoints", endpoint)
	if kv.Value != "acked-value" || kv.Token != grant.Token {
		t.Fatalf("kv get k through %s = %+v, want acked-value written with token %d", endpoint, kv, grant.Token)
	}
	out, err := exec.Command(binary, "acquire", "acked", "--wait", "0", "--endpoints", endpoint).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "locked") {
		t.Fatalf("a second acquire of the acknowledged grant: %v\n%s\nwant locked", err, out)
	}
}

// TestLostDiskWithPeersDownLosesNothing: a member whose data dir is lost,
// restarted with its original command (the same --bootstrap list) while
// the other voters are down, does not found the cluster again: it waits,
// and once a voter with the log answers it refuses to start and says how
// to rejoin. The write and the grant acknowledged while the third voter
// was down survive, and the documented way back (cluster remove, --join)
// returns the member with them.
func TestLostDiskWithPeersDownLosesNothing(t *testing.T) {
	procs := startCluster(t, 3)
	n1, n2, n3 := procs[0], procs[1], procs[2]
	boot := bootList(procs)
	waitMembers(t, n1.api, 3)

	n3.kill()
	var grant grantOut
	cli(t, &grant, "acquire", "acked", "--ttl", "1h", "--owner", "writer", "--endpoints", n1.api+","+n2.api)
	var put struct {
		Status string `json:"status"`
	}
	cli(t, &put, "kv", "put", "k", "acked-value", "--token", strconv.FormatUint(grant.Token, 10), "--endpoints", n1.api+","+n2.api)
	if put.Status != "accepted" {
		t.Fatalf("kv put: %+v", put)
	}

	n1.kill()
	n2.kill()
	if err := os.RemoveAll(n2.dir); err != nil {
		t.Fatal(err)
	}
	n2.start(t, boot) // its original command
	n3.start(t, boot) // the voter that missed the write, with its old disk
	err := waitExit(t, n2, 20*time.Second)
	if err == nil {
		t.Fatal("the wiped n2 exited 0")
	}
	logText, _ := os.ReadFile(n2.log.Name())
	for _, want := range []string{"was formed before", "leasehold cluster remove n2", "--join"} {
		if !strings.Contains(string(logText), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, tail(string(logText), 1500))
		}
	}

	n1.start(t, boot) // back with its log: n1 + n3 are a quorum
	waitHealthy(t, n1.api)
	wantAcked(t, n1.api, grant)
	wantAcked(t, n3.api, grant)

	removeMember(t, n2.id, n1.api)
	n2.start(t, "", "--join", n1.api)
	waitMembers(t, n1.api, 3)
	wantAcked(t, n2.api, grant)
}
