//go:build leasehold_failpoints

package failpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestMain runs as the child of TestCrashAtHit when LEASEHOLD_FAILPOINT_CHILD
// is set: it reaches its points and prints each hit before it.
func TestMain(m *testing.M) {
	if os.Getenv("LEASEHOLD_FAILPOINT_CHILD") != "" {
		Leading(os.Getenv("LEASEHOLD_FAILPOINT_CHILD") == "leader")
		for i := 1; i <= 5; i++ {
			fmt.Printf("before %d\n", i)
			Inject(LogAppendBefore) // never armed here
			Inject(FSMApplyAfter)
		}
		fmt.Println("done")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(t *testing.T, spec, role string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), Env+"="+spec, "LEASEHOLD_FAILPOINT_CHILD="+role)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func TestCrashAtHit(t *testing.T) {
	out, errs, err := runChild(t, "fsm-apply-after:3", "follower")
	if !killed(err) {
		t.Fatalf("child ended with %v, want SIGKILL; stdout %q stderr %q", err, out, errs)
	}
	if !strings.HasSuffix(out, "before 3\n") {
		t.Errorf("child printed %q, want it to die at the third hit", out)
	}
	if !strings.Contains(errs, "leasehold: failpoint fsm-apply-after reached (hit 3): SIGKILL\n") {
		t.Errorf("stderr %q lacks the reached line", errs)
	}
}

func TestRole(t *testing.T) {
	out, errs, err := runChild(t, "fsm-apply-after:1:leader", "follower")
	if err != nil || !strings.HasSuffix(out, "done\n") {
		t.Errorf("a point armed for the leader fired on a follower: %v, stdout %q stderr %q", err, out, errs)
	}
	out, errs, err = runChild(t, "fsm-apply-after:2:leader", "leader")
	if !killed(err) || !strings.HasSuffix(out, "before 2\n") {
		t.Errorf("a point armed for the leader: %v, stdout %q stderr %q; want SIGKILL at the second hit", err, out, errs)
	}
}

func TestBadSpec(t *testing.T) {
	_, errs, err := runChild(t, "fsm-apply-after:0", "follower")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(errs, Env) {
		t.Errorf("a bad spec: %v, stderr %q; want exit code 2 naming %s", err, errs, Env)
	}
}
