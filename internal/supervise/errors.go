package supervise

import "errors"

// Sentinel errors.
var (
	// ErrInvalidConfig means Config.Validate refused the configuration; the wrapped message
	// names the field.
	ErrInvalidConfig = errors.New("supervise: invalid config")

	// ErrStart means the command could not be started (not found, not executable). Nothing
	// runs.
	ErrStart = errors.New("supervise: start")

	// ErrGroupSurvived means processes of the command's group were still alive GroupWait
	// after SIGKILL (stuck in the kernel, or not killable by this user). The caller must not
	// release the lock as if the command were gone; let the lease expire instead.
	ErrGroupSurvived = errors.New("supervise: process group survived SIGKILL")
)
