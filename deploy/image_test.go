//go:build leasehold_image

package deploy

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The container image, built by scripts/image.sh (its reference in
// LEASEHOLD_IMAGE) and run with podman as a user would, with the image's
// own entrypoint and command:
//
//	LEASEHOLD_IMAGE=$(bash scripts/image.sh | tail -n 1)
//	(cd deploy && go test -tags leasehold_image -run TestImage .)

// podman runs podman with args and returns its trimmed stdout.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("podman", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("podman %v: %v\n%s%s", args, err, out, stderr)
	}
	return strings.TrimSpace(string(out))
}

// TestImage: `podman run --network host -v VOLUME:/data IMAGE` serves on
// 127.0.0.1:7420 (/readyz answers) as a non-root user; `podman stop` ends
// it with status 0; a new container on the same volume keeps the grant
// and the write of the first.
func TestImage(t *testing.T) {
	image := os.Getenv("LEASEHOLD_IMAGE")
	if image == "" {
		t.Fatal("LEASEHOLD_IMAGE is empty: build the image with scripts/image.sh and give its reference")
	}
	need(t, "podman", "podman")
	if user := podman(t, "image", "inspect", "--format", "{{.Config.User}}", image); user == "" || user == "0" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0:") {
		t.Fatalf("the image runs as user %q, want a non-root user", user)
	}
	volume := fmt.Sprintf("leasehold-image-test-%d", os.Getpid())
	t.Cleanup(func() { _ = exec.Command("podman", "volume", "rm", "-f", volume).Run() })

	run := func() string {
		id := podman(t, "run", "-d", "--network", "host", "-v", volume+":/data", image)
		t.Cleanup(func() {
			if t.Failed() {
				out, _ := exec.Command("podman", "logs", id).CombinedOutput()
				t.Logf("container log:\n%s", tail(string(out), 3000))
			}
			_ = exec.Command("podman", "rm", "-f", id).Run()
		})
		waitReady(t, http.DefaultClient, "http://127.0.0.1:7420/readyz", 30*time.Second)
		if uid := podman(t, "top", id, "huser"); !strings.HasSuffix(uid, "65532") {
			t.Fatalf("the server runs as %q, want the image's user 65532", uid)
		}
		return id
	}
	stop := func(id string) {
		podman(t, "stop", "--time", "20", id)
		if code := podman(t, "inspect", "--format", "{{.State.ExitCode}}", id); code != "0" {
			t.Fatalf("podman stop: the container exited with status %s, want 0", code)
		}
	}

	id := run()
	var grant struct{ Token uint64 }
	cliJSON(t, &grant, "acquire", "image", "--ttl", "1h", "--endpoints", "127.0.0.1:7420")
	var put struct{ Status string }
	cliJSON(t, &put, "kv", "put", "k", "kept", "--token", fmt.Sprint(grant.Token), "--endpoints", "127.0.0.1:7420")
	stop(id)

	id = run()
	var kv struct {
		Value string
		Token uint64
	}
	cliJSON(t, &kv, "kv", "get", "k", "--endpoints", "127.0.0.1:7420")
	if kv.Value != "kept" || kv.Token != grant.Token {
		t.Fatalf("after a restart on the same volume: kv get k = %+v, want kept with token %d", kv, grant.Token)
	}
	stop(id)
}
