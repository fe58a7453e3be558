package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// A flood runs in a process of its own (the driver started with
// -flood-child NAME), so that the flood's goroutines and garbage do not
// slow the canary's process: what the canary measures is the node. The
// child writes two lines on stdout: "started" when its measured window
// begins, then its childReport.

type childReport struct {
	Sent, Refused int64
	Answers       string
	Err           string
}

// runChild runs flood f in this process and reports on stdout.
func runChild(ctx context.Context, e *env, f flood, dur time.Duration) int {
	var c counters
	start := func() context.Context {
		fmt.Println("started")
		w, cancel := context.WithTimeout(ctx, dur)
		context.AfterFunc(w, cancel)
		return w
	}
	rep := childReport{}
	if err := f.run(ctx, e, &c, start); err != nil {
		rep.Err = err.Error()
	}
	rep.Sent, rep.Refused, rep.Answers = c.sent.Load(), c.refused.Load(), c.answers()
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	return 0
}

// spawn runs flood f in a child process; started is called when its window
// begins. The child is killed if it outlives setup and window by far.
func spawn(ctx context.Context, e *env, f flood, dur time.Duration, started func()) (childReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return childReport{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, dur+3*time.Minute)
	defer cancel()
	args := []string{"-flood-child", f.name, "-addr", e.addr, "-flood-src", e.src,
		"-conns", strconv.Itoa(e.conns), "-dur", dur.String()}
	if e.short {
		args = append(args, "-short")
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return childReport{}, err
	}
	if err := cmd.Start(); err != nil {
		return childReport{}, err
	}
	var rep childReport
	var got bool
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if line == "started" {
			started()
			continue
		}
		if err := json.Unmarshal([]byte(line), &rep); err == nil {
			got = true
		}
	}
	werr := cmd.Wait()
	switch {
	case !got && werr != nil:
		return rep, fmt.Errorf("flood process: %w", werr)
	case !got:
		return rep, fmt.Errorf("flood process: no report")
	case rep.Err != "":
		return rep, fmt.Errorf("%s", rep.Err)
	}
	return rep, nil
}
