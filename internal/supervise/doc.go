// Package supervise runs a command for as long as a lease is held, and makes sure that the
// command — its whole process tree — is dead before the lease may be lost and before the
// caller releases the lock. It is the process half of `leasehold run` (and of any later
// command that holds a lock around a child process); it knows nothing of the CLI or the
// server.
//
// # Design
//
// A lease, as the holder sees it, is a local safe deadline that moves later with every
// confirmed renewal, plus a Done channel closed when the lease may be lost. The command must
// not run past the deadline: after it the grantor may hand the lock, and a higher token, to
// someone else.
//
//	renewal sent      next renewal due        deadline − KillAfter          deadline
//	     │── interval ──▶│ … renewal overdue … ──▶│ SIGTERM to the group ──▶│ SIGKILL to the group
//	     └────────────────────────── window (TTL·(1−drift) − margin) ───────┘
//
// In words:
//
//   - The command runs in a process group of its own (Setpgid; led by the sentinel below
//     when /bin/sh exists); every signal goes to the
//     group (kill(-pgid)), so the children a shell script starts are stopped with it.
//   - On Linux the command gets SIGKILL from the kernel when the supervising process dies
//     (Pdeathsig), so a killed supervisor does not leave it running without renewals. The
//     parent-death signal fires when the OS thread that started the child exits, so Run
//     starts the child from a goroutine locked to its thread until the child is reaped.
//     That signal reaches the command only; for its descendants a sentinel shell, started
//     before the command and leading the group the command joins, waits on a pipe from the
//     supervisor and SIGKILLs the group when the pipe closes — which the kernel does when
//     the supervisor dies, however it dies, even the moment after the command started.
//   - SIGTERM is sent at deadline − KillAfter and SIGKILL at the deadline, re-reading the
//     deadline each time (a renewal moves both later). KillAfter must not exceed
//     MaxKillAfter(window, interval), so that SIGTERM is only ever sent once a renewal is
//     overdue, never to a command whose lease is healthy. When the lease is reported lost
//     early (the server said it expired), SIGTERM goes at once and SIGKILL at the earlier of
//     the deadline and KillAfter later.
//   - SIGINT, SIGTERM and SIGHUP received by the caller (Config.Signals) are forwarded to
//     the group.
//   - When the command exits, processes it left in its group get SIGTERM, then SIGKILL after
//     KillAfter (or at the deadline, if sooner). Run returns only once no live process is
//     left in the group (zombies do not count), polling kill(-pgid, 0) and, on Linux, /proc;
//     if the group survives SIGKILL for GroupWait, Run returns ErrGroupSurvived and the
//     caller must not release the lock.
//
// A process that leaves the group (setsid, setpgid) escapes all of this; containing those
// needs a cgroup, which is outside this package.
package supervise
