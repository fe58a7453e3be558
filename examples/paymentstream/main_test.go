package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun runs the example as `go run ./examples/paymentstream` does and checks its verdict
// and the lines a reader relies on.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"409 stale-token, last_token 18",
		"last token 18",
		"payment service ledger: p-1001 by A (token 17), p-1002 by B (token 18), p-1004 by B (token 18)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out.String(), "UNEXPECTED") {
		t.Error("output reports an unexpected result")
	}
	if n := strings.Count(out.String(), "(never saw it)"); n != 2 {
		t.Errorf("%d refused charges, want 2 (before and after the restart)", n)
	}
}
