package fence_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serviceURL returns the URL in env var name. When it is unset the test fails in CI (CI=true)
// and is skipped elsewhere, with the command that starts the services.
func serviceURL(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	msg := fmt.Sprintf("%s is not set: start the test services with: eval \"$(bash scripts/ci-services.sh)\"", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg) // LEASEHOLD_TEST_* unset on a dev box; CI (CI=true) fails above instead
	return ""
}

// unique returns prefix followed by random hex, usable as a SQL identifier or Redis key part,
// so parallel tests share one server without sharing state.
func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
