"""python -m leasehold run NAME [--if-free] [options] -- CMD [ARGS...]

Holds the lock NAME while CMD runs, as ``leasehold run`` does: CMD gets
LEASEHOLD_NAME, LEASEHOLD_TOKEN and LEASEHOLD_LEASE_ID in its environment
(pass the token to the resource). With --if-free the lock is tried once:
when another session holds it, nothing runs and the exit status is 0 (a
cron job whose previous run is still going skips this one); without it the
run waits in the queue (--wait bounds the wait, in seconds).

If the lease may be lost (no renewal confirmed before the local safe
deadline, or the server expired the session), CMD's process group gets
SIGTERM at once and SIGKILL --kill-after seconds later. The exit status is
CMD's (128+N if signal N ended it); failures before CMD starts exit with
the error code's status (docs/operating/limits-and-errors.md: locked 7, unavailable
12, ...).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading

from . import errors
from .client import DEFAULT_ENDPOINT, Client, default_owner


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m leasehold", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="hold a lock while a command runs: run NAME [options] -- CMD [ARGS...]")
    r.add_argument("name")
    r.add_argument("--if-free", action="store_true", help="try once; if the lock is held, run nothing and exit 0")
    r.add_argument("--wait", type=float, default=None, help="wait in the queue at most this many seconds (default: until granted)")
    r.add_argument("--ttl", type=float, default=10.0, help="session TTL in seconds (default 10)")
    r.add_argument("--owner", default=None, help="owner label (default hostname:pid)")
    r.add_argument("--kill-after", type=float, default=3.0, help="SIGKILL this long after SIGTERM (default 3)")
    r.add_argument("--endpoints", default=os.environ.get("LEASEHOLD_ENDPOINTS", DEFAULT_ENDPOINT))
    r.add_argument("--token-file", default=None, help="file holding a bearer token (or LEASEHOLD_AUTH_TOKEN)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    a = _parser().parse_args(argv)
    if not cmd:
        print("leasehold run: no command given (NAME -- CMD [ARGS...])", file=sys.stderr)
        return errors.EXIT_CODES["invalid-argument"]
    token = os.environ.get("LEASEHOLD_AUTH_TOKEN")
    if a.token_file:
        with open(a.token_file) as f:
            token = f.read().strip()
    client = Client(a.endpoints, token=token)
    try:
        return _run(client, a, cmd)
    except errors.LeaseholdError as e:
        print(f"leasehold run: {e}", file=sys.stderr)
        return errors.EXIT_CODES.get(e.code, 1)
    except errors.LeaseLost as e:
        print(f"leasehold run: lease lost: {e}", file=sys.stderr)
        return errors.EXIT_CODES["lease-expired"]
    finally:
        client.close()


def _run(client: Client, a, cmd: list[str]) -> int:
    s = client.session(ttl=a.ttl, owner=a.owner or default_owner())
    try:
        try:
            lock = s.try_acquire(a.name) if a.if_free else s.acquire(a.name, timeout=a.wait)
        except errors.Locked as e:
            print(f"leasehold run: {a.name} is held, not running: {e.message}", file=sys.stderr)
            return 0
        env = dict(os.environ, LEASEHOLD_NAME=lock.name, LEASEHOLD_TOKEN=str(lock.token), LEASEHOLD_LEASE_ID=lock.lease_id)
        child = subprocess.Popen(cmd, env=env, start_new_session=True)
        stop = threading.Event()

        def lost(cause: BaseException) -> None:
            if isinstance(cause, errors.Released) or child.poll() is not None:
                return
            print(f"leasehold run: {cause}; stopping the command", file=sys.stderr)
            _signal(child, signal.SIGTERM)
            threading.Thread(target=lambda: stop.wait(a.kill_after) or _signal(child, signal.SIGKILL), daemon=True).start()

        lock.on_done(lost)
        forwarded = {sig: signal.signal(sig, lambda n, _f: _signal(child, n)) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            rc = child.wait()
        finally:
            stop.set()
            for sig, h in forwarded.items():
                signal.signal(sig, h)
        if lock.err is None or isinstance(lock.err, errors.Released):
            try:
                lock.release(timeout=_END_TIMEOUT)
            except (errors.NotHolder, errors.LeaseExpired):
                pass
            except errors.LeaseholdError as e:
                print(f"leasehold run: {e}", file=sys.stderr)
        return rc if rc >= 0 else 128 - rc
    finally:
        # A lost session is past its safe deadline: the server expires it
        # within moments, and closing it may wait on an unreachable server.
        if not isinstance(s.err, errors.LeaseLost):
            try:
                s.close(timeout=_END_TIMEOUT)
            except errors.LeaseholdError as e:  # the server expires it by TTL
                print(f"leasehold run: {e}", file=sys.stderr)


# _END_TIMEOUT bounds the release and the session's close after CMD ended:
# a server that cannot be reached then expires the session by its TTL.
_END_TIMEOUT = 5.0


def _signal(child: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(child.pid, sig)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    sys.exit(main())
