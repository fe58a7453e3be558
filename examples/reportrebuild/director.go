//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/client"
)

// direct runs the scenario: it starts the two workers, pauses and resumes worker-A, prints
// the timeline and checks every result.
func direct(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	// Check both services first, so that a missing one is reported with its fix.
	c, err := client.Dial(ctx, cfg.endpoints, client.WithRetryTimeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("no leasehold server answers at %s; start one with `go run ./cmd/leasehold serve --data DIR` or pass --endpoints: %w", cfg.endpoints, err)
	}
	defer c.Close()
	// A linearizable read waits until the cluster has a leader, so that the workers' short
	// leases do not start counting while a fresh server is still electing one.
	if _, err := c.Status(ctx, lockName); err != nil {
		return fmt.Errorf("leasehold at %s: %w", cfg.endpoints, err)
	}
	pool, err := openPool(ctx, cfg.postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	guard, reports := tables(pool, cfg.tablePrefix)
	if err := guard.Init(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+reports+` (
		id         integer       PRIMARY KEY,
		body       text          NOT NULL,
		written_by text          NOT NULL,
		token      numeric(20,0) NOT NULL,
		written_at timestamptz   NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("postgres: create %s: %w", reports, err)
	}
	// Start from a clean slate (see the package comment: an example-only step).
	fenceTable := pgx.Identifier{cfg.tablePrefix + "_fence"}.Sanitize()
	if _, err := pool.Exec(ctx, `DELETE FROM `+fenceTable+` WHERE resource = $1`, resource); err != nil {
		return fmt.Errorf("postgres: reset %s: %w", fenceTable, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM `+reports+` WHERE id = $1`, reportID); err != nil {
		return fmt.Errorf("postgres: reset %s: %w", reports, err)
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "seed 000: a paused worker's late write, refused by PostgreSQL")
	fmt.Fprintf(stdout, "  leasehold %s, lock %s; PostgreSQL tables %s_fence (strict) and %s_reports\n\n", cfg.endpoints, lockName, cfg.tablePrefix, cfg.tablePrefix)
	fmt.Fprintf(stdout, "%9s  %-8s  %-52s  %5s  %s\n", "T", "WHO", "EVENT", "TOKEN", "RESULT")

	const ttlA = time.Second
	a, err := startWorker(self, cfg, workerA, ttlA, stderr)
	if err != nil {
		return err
	}
	defer a.stop()
	ma, err := a.expect(ctx, "acquired")
	if err != nil {
		return err
	}
	tl := &timeline{w: stdout, start: time.Now()} // T=0: worker-A holds the lock
	tl.row(workerA, fmt.Sprintf("acquire %s, ttl %v", lockName, time.Duration(ma.TTLMs)*time.Millisecond), ma.Token, "granted", "granted")

	if err := a.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	tl.row("director", fmt.Sprintf("SIGSTOP worker-A (pid %d): no more keepalives", a.cmd.Process.Pid), 0, "stopped", "stopped")

	b, err := startWorker(self, cfg, workerB, 10*time.Second, stderr)
	if err != nil {
		return err
	}
	defer b.stop()
	mb, err := b.expect(ctx, "acquired")
	if err != nil {
		return err
	}
	result := "granted, larger token"
	if mb.Token <= ma.Token {
		result = "granted, token NOT larger"
	}
	tl.row(workerB, "acquire: queued until worker-A's lease expired", mb.Token, result, "granted, larger token")

	if err := b.command(cmdWrite); err != nil {
		return err
	}
	mw, err := b.expect(ctx, "write")
	if err != nil {
		return err
	}
	tl.row(workerB, "write report 417 through pgfence.Guard", mb.Token, writeResult(mw), "accepted")

	if err := a.signal(syscall.SIGCONT); err != nil {
		return err
	}
	tl.row("director", "SIGCONT worker-A", 0, "resumed", "resumed")
	if err := a.command(cmdWriteLate); err != nil {
		return err
	}
	ml, err := a.expect(ctx, "lease")
	if err != nil {
		return err
	}
	tl.row(workerA, "wakes up: Lock.Done() has fired", ma.Token, "lease "+ml.Result, "lease lost")
	tl.note("context.Cause(lock.Context()): %s", ml.Detail)
	mw, err = a.expect(ctx, "write")
	if err != nil {
		return err
	}
	tl.row(workerA, "writes report 417 anyway (the late request)", ma.Token, writeResult(mw), fmt.Sprintf("stale-token, last token %d", mb.Token))
	if mw.Detail != "" {
		tl.note("%s", mw.Detail)
	}
	if err := a.command(cmdRelease); err != nil {
		return err
	}
	mr, err := a.expect(ctx, "release")
	if err != nil {
		return err
	}
	tl.row(workerA, "release", ma.Token, mr.Result, "not-holder")
	if err := a.wait(ctx); err != nil {
		return err
	}

	info, err := c.Status(ctx, lockName)
	if err != nil {
		return err
	}
	holder := "free"
	if h := info.GetHolder(); h != nil {
		holder = "held by " + h.GetOwner()
	}
	tl.row("director", "status "+lockName, info.GetHolder().GetToken(), holder, "held by "+workerB)

	if err := b.command(cmdRelease); err != nil {
		return err
	}
	if mr, err = b.expect(ctx, "release"); err != nil {
		return err
	}
	tl.row(workerB, "release", mb.Token, mr.Result, "released")
	if err := b.wait(ctx); err != nil {
		return err
	}

	var body, by, token string
	if err := pool.QueryRow(ctx, `SELECT body, written_by, token::text FROM `+reports+` WHERE id = $1`, reportID).Scan(&body, &by, &token); err != nil {
		return fmt.Errorf("postgres: read report %d: %w", reportID, err)
	}
	last, _, err := guard.Last(ctx, resource)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nfinal row  %s_reports: id=%d written_by=%s token=%s body=%q\n", cfg.tablePrefix, reportID, by, token, body)
	fmt.Fprintf(stdout, "fence row  %s_fence: resource=%s token=%d\n", cfg.tablePrefix, resource, last)
	want := strconv.FormatUint(mb.Token, 10)
	if by != workerB || token != want || last != mb.Token {
		tl.bad++
		fmt.Fprintf(stdout, "UNEXPECTED: want the row written by %s with token %s, and fence token %s\n", workerB, want, want)
	}
	if tl.bad > 0 {
		return fmt.Errorf("%d results differ from seed 000", tl.bad)
	}
	fmt.Fprintf(stdout, "ok: worker-A's late write (token %d) was refused; the row is worker-B's (token %d)\n", ma.Token, mb.Token)
	return nil
}

func writeResult(m message) string {
	if m.Result == "stale-token" {
		return fmt.Sprintf("stale-token, last token %d", m.LastToken)
	}
	return m.Result
}

// timeline prints rows as they happen and counts results that differ from the expected.
type timeline struct {
	w     io.Writer
	start time.Time
	bad   int
}

func (t *timeline) row(who, event string, token uint64, result, want string) {
	tok := ""
	if token != 0 {
		tok = strconv.FormatUint(token, 10)
	}
	if result != want {
		t.bad++
		result += "   UNEXPECTED, want " + want
	}
	fmt.Fprintf(t.w, "%6d ms  %-8s  %-52s  %5s  %s\n", time.Since(t.start).Milliseconds(), who, event, tok, result)
}

func (t *timeline) note(format string, a ...any) {
	fmt.Fprintf(t.w, "%9s  %-8s  └ %s\n", "", "", fmt.Sprintf(format, a...))
}

// worker is a worker process under the director's control: commands go to its stdin, its
// messages come from its stdout.
type worker struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  chan message  // closed once the process exited; waitErr is set before
	done chan struct{} // closed with out

	waitErr error
}

// startWorker starts self as the worker name. The service addresses travel in the
// environment, so that the PostgreSQL URL (and its password) is not on a command line.
func startWorker(self string, cfg config, name string, ttl time.Duration, stderr io.Writer) (*worker, error) {
	cmd := exec.Command(self, "--worker", name, "--ttl", ttl.String(), "--table-prefix", cfg.tablePrefix)
	cmd.Env = append(os.Environ(), "LEASEHOLD_ENDPOINTS="+cfg.endpoints, "LEASEHOLD_TEST_POSTGRES="+cfg.postgres)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	w := &worker{name: name, cmd: cmd, in: in, out: make(chan message, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = message{Event: "unreadable", Detail: sc.Text()}
			}
			w.out <- m
		}
		_, _ = io.Copy(io.Discard, stdout) // after a scan error: read to EOF before Wait
		w.waitErr = cmd.Wait()
		close(w.out)
		close(w.done)
	}()
	return w, nil
}

func (w *worker) signal(sig syscall.Signal) error {
	if err := w.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: %v: %w", w.name, sig, err)
	}
	return nil
}

func (w *worker) command(c string) error {
	if _, err := io.WriteString(w.in, c+"\n"); err != nil {
		return fmt.Errorf("%s: send %q: %w", w.name, c, err)
	}
	return nil
}

// expect returns the worker's next message, which must be event.
func (w *worker) expect(ctx context.Context, event string) (message, error) {
	select {
	case m, ok := <-w.out:
		switch {
		case !ok:
			return message{}, fmt.Errorf("%s exited before %q: %v", w.name, event, w.waitErr)
		case m.Event != event:
			return m, fmt.Errorf("%s: got %s %q %s, want %q", w.name, m.Event, m.Result, m.Detail, event)
		}
		return m, nil
	case <-ctx.Done():
		return message{}, fmt.Errorf("%s: waiting for %q: %w", w.name, event, ctx.Err())
	}
}

// wait waits for the worker to exit and returns an error unless it exited 0 with nothing
// more to say.
func (w *worker) wait(ctx context.Context) error {
	_ = w.in.Close()
	var extra []string
	for {
		select {
		case m, ok := <-w.out:
			if ok {
				extra = append(extra, m.Event)
				continue
			}
			if w.waitErr != nil {
				return fmt.Errorf("%s: %w", w.name, w.waitErr)
			}
			if len(extra) > 0 {
				return fmt.Errorf("%s: unexpected messages %s", w.name, strings.Join(extra, ", "))
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for exit: %w", w.name, ctx.Err())
		}
	}
}

// stop ends the worker if it is still running — continuing it first if it is stopped — and
// waits for it. It is a no-op after wait returned.
func (w *worker) stop() {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.in.Close()
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	_ = w.cmd.Process.Kill()
	for range w.out { // drain until the process exited
	}
}
