package linz

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is what porcupine found for one history.
type Result struct {
	What    string // the property and history, e.g. "P1: lock history"
	Ops     int    // operations checked
	Limit   time.Duration
	Verdict porcupine.CheckResult
	Info    porcupine.LinearizationInfo // for the visualization

	model porcupine.NondeterministicModel
}

// Check checks ops against m within limit of real time. A history the
// search cannot decide within limit has Verdict porcupine.Unknown: it
// verified nothing and found nothing, and is neither a pass nor a
// violation.
func Check(what string, m porcupine.NondeterministicModel, ops []porcupine.Operation, limit time.Duration) Result {
	res, info := porcupine.CheckOperationsVerbose(m.ToModel(), ops, limit)
	return Result{What: what, Ops: len(ops), Limit: limit, Verdict: res, Info: info, model: m}
}

// Violation describes an illegal history, or is "" when the history is
// linearizable or undecided.
func (r Result) Violation() string {
	if r.Verdict != porcupine.Illegal {
		return ""
	}
	return fmt.Sprintf("%s is not linearizable (%d operations)", r.What, r.Ops)
}

// Undecided describes a history porcupine could not decide within the
// limit, or is "" when it decided.
func (r Result) Undecided() string {
	if r.Verdict != porcupine.Unknown {
		return ""
	}
	return fmt.Sprintf("%s undecided after %v (%d operations)", r.What, r.Limit, r.Ops)
}

// Visualize writes porcupine's HTML visualization of the history to path.
func (r Result) Visualize(path string) error {
	return porcupine.VisualizePath(r.model.ToModel(), r.Info, path)
}
