// Sessions (leases) with a keepalive and a local safe deadline, and the
// locks held under them.
import type { Holding } from "./gen/leasehold/v1/leasehold_pb.js";
import type { Client } from "./client.js";
import { Code, LeaseholdError, LeaseLostError, ReleasedError, SessionClosedError } from "./errors.js";
import { keeperOf, now, type Renewal } from "./keeper.js";

/** Options of Client.session. */
export interface SessionOptions {
  /** ttlMs is the TTL asked for (default 10000); the server grants 1 s to 1 h and clamps others. */
  ttlMs?: number;
  /** owner is a label operators see (default none). */
  owner?: string;
  /** drift is the clock-rate drift the holder allows for (default 0.02, the server's default). */
  drift?: number;
  /** marginMs is an extra safety margin (default 100). */
  marginMs?: number;
  /** keepaliveMs is how often the session renews (default TTL/3). */
  keepaliveMs?: number;
  /** signal cancels the creation. */
  signal?: AbortSignal;
}

/** Options of acquire and tryAcquire. */
export interface AcquireOptions {
  /** waitMs bounds the time in the queue (acquire only; 0 or absent: until signal). */
  waitMs?: number;
  /** lockDelayMs: after this holding ends by expiry, the name is not granted again for this long (capped at 60 s). */
  lockDelayMs?: number;
  /** signal stops waiting; the queue entry is withdrawn. */
  signal?: AbortSignal;
}

/** Lock is one holding: (name, leaseId, token). */
export interface Lock {
  readonly name: string;
  /** token is the fencing token: pass it with every write to the protected resource. */
  readonly token: bigint;
  readonly leaseId: string;
  /** holding is the grant as the server described it. */
  readonly holding: Holding;
  /**
   * signal aborts the moment the lease may be lost (reason LeaseLostError),
   * the session is closed (SessionClosedError), the lock is released
   * (ReleasedError) or the session was granted the name again
   * (LeaseholdError not-holder).
   */
  readonly signal: AbortSignal;
  /**
   * release ends the holding; signal aborts first, so that the critical
   * section stops before the name can pass on. It fails with code
   * not-holder when the holding is no longer current, changing nothing.
   */
  release(opts?: { signal?: AbortSignal }): Promise<void>;
}

/** cancelWaitTimeoutMs bounds the withdrawal of an attempt whose outcome is unknown. */
const cancelWaitTimeoutMs = 5000;

/**
 * Session is one lease: a TTL kept alive in the background, under which
 * any number of locks are held. It counts the lease from the moment it SENT
 * each request that renewed it (create, acquire, keepalive) and considers
 * it possibly lost at
 *
 *     sent + TTL·(1−drift) − margin
 *
 * unless a later renewal was confirmed first. At that moment `signal` and
 * every lock's signal abort with a LeaseLostError: stop the critical
 * section. The server frees the lock no earlier than TTL·(1+drift) after
 * it answered, so while clock rates differ by less than drift the holder
 * stops first. Pauses can still let a write out late: pass the token.
 *
 * The sessions of one Client are renewed together (keeper.ts), in
 * KeepAlive calls of up to 1000 lease ids; a renewal due within a quarter
 * of its interval goes, a little early, with the call being sent.
 */
export class Session {
  readonly client: Client;
  readonly id: string;
  /** ttlMs is the TTL the server granted. */
  readonly ttlMs: number;
  readonly owner: string;
  readonly #drift: number;
  readonly #marginMs: number;
  readonly #keepaliveMs: number;

  #deadline: number; // the local safe deadline (performance.now() time)
  readonly #lost = new AbortController(); // aborts when the lease may be lost or the session closed
  #timer: ReturnType<typeof setTimeout> | undefined; // the deadline timer
  readonly #renewal: Renewal; // this session in its Client's keeper
  readonly #held = new Map<string, { lock: Lock; end: (reason: unknown) => void }>(); // by name
  readonly #naming = new Map<string, Promise<void>>(); // by name: the tail of the acquires running

  private constructor(client: Client, id: string, ttlMs: number, owner: string, sent: number, o: Required<Omit<SessionOptions, "signal" | "owner" | "ttlMs">>) {
    this.client = client;
    this.id = id;
    this.ttlMs = ttlMs;
    this.owner = owner;
    this.#drift = o.drift;
    this.#marginMs = o.marginMs;
    this.#keepaliveMs = o.keepaliveMs > 0 ? o.keepaliveMs : ttlMs / 3;
    this.#deadline = this.#safeDeadline(sent);
    this.#armDeadline();
    this.#renewal = {
      id,
      keepaliveMs: this.#keepaliveMs,
      next: sent + this.#keepaliveMs,
      inflight: false,
      deadline: () => this.#deadline,
      renewed: (at) => this.#renewedAt(at),
      expired: (e) => this.#lose(new LeaseLostError(e.message, { cause: e })),
    };
    keeperOf(client).add(this.#renewal);
  }

  /** create asks the server for a session and starts its keepalive. */
  static async create(client: Client, opts: SessionOptions): Promise<Session> {
    const ttlMs = opts.ttlMs ?? 10_000;
    const drift = opts.drift ?? 0.02;
    const marginMs = opts.marginMs ?? 100;
    if (!(drift >= 0 && drift < 1) || !(marginMs >= 0)) {
      throw new LeaseholdError(Code.InvalidArgument, "drift must be in [0, 1) and marginMs ≥ 0");
    }
    const sent = now();
    const res = await client.call(
      "create session",
      "idempotent",
      (rpc, signal) => rpc.createSession({ ttlMs: BigInt(Math.round(ttlMs)), owner: opts.owner ?? "" }, { signal }),
      opts.signal,
    );
    return new Session(client, res.leaseId, Number(res.ttlMs), res.owner, sent, { drift, marginMs, keepaliveMs: opts.keepaliveMs ?? 0 });
  }

  /**
   * signal aborts the moment the lease may be lost (LeaseLostError: the
   * local safe deadline passed without a confirmed renewal, or the server
   * said it expired) or the session was closed (SessionClosedError).
   */
  get signal(): AbortSignal {
    return this.#lost.signal;
  }

  /** deadline is the local safe deadline, in performance.now() milliseconds. */
  get deadline(): number {
    return this.#deadline;
  }

  #safeDeadline(sent: number): number {
    return sent + this.ttlMs * (1 - this.#drift) - this.#marginMs;
  }

  /** renewedAt records a renewal confirmed for a request sent at sent; false when already lost. */
  #renewedAt(sent: number): boolean {
    if (this.#lost.signal.aborted) return false;
    const d = this.#safeDeadline(sent);
    if (d > this.#deadline) {
      this.#deadline = d;
      this.#armDeadline();
    }
    return true;
  }

  #armDeadline(): void {
    clearTimeout(this.#timer);
    const wait = Math.max(this.#deadline - now(), 0);
    this.#timer = setTimeout(() => {
      if (now() >= this.#deadline) {
        this.#lose(new LeaseLostError("no renewal confirmed before the local deadline"));
      } else {
        this.#armDeadline(); // a timer may fire early by a fraction of a millisecond
      }
    }, Math.ceil(wait));
  }

  /** lose aborts the signal with reason (the first reason wins). */
  #lose(reason: unknown): void {
    if (this.#lost.signal.aborted) return;
    clearTimeout(this.#timer);
    keeperOf(this.client).remove(this.#renewal);
    this.#lost.abort(reason);
  }

  /**
   * close stops the keepalive and ends the session on the server, releasing
   * its locks without lock-delay. The signal aborts with SessionClosedError.
   */
  async close(opts: { signal?: AbortSignal } = {}): Promise<void> {
    this.#lose(new SessionClosedError());
    try {
      await this.client.call("close session", "idempotent", (rpc, signal) => rpc.closeSession({ leaseId: this.id }, { signal }), opts.signal);
    } catch (e) {
      if (e instanceof LeaseholdError && e.code === Code.LeaseExpired) return; // already gone
      throw e;
    }
  }

  /**
   * orphan stops the keepalive without ending the session: the server
   * expires it one TTL after its last renewal (a renewal already on its way
   * may still land). The signal aborts at once with a LeaseLostError: this
   * Session no longer knows whether it holds.
   */
  async orphan(): Promise<void> {
    this.#lose(new LeaseLostError("session orphaned"));
  }

  /**
   * acquire takes the lock name, waiting in the server's FIFO queue until it
   * is granted, waitMs passes (code deadline-exceeded) or the signal aborts
   * (code canceled). Acquiring a name the session holds returns the same
   * holding.
   *
   * A grant the caller never learned is never kept: each attempt carries a
   * fresh random wait id, and when it ends in anything but a definite
   * refusal (a deadline, a cancel, a lost reply, outcome-unknown) the wait
   * is withdrawn with CancelWait, which also releases a grant that raced
   * with giving up. If even that fails, the error is outcome-unknown.
   */
  acquire(name: string, opts: AcquireOptions = {}): Promise<Lock> {
    return this.#acquire(name, opts, "acquire " + name, (waitId, signal) =>
      this.client.call(
        "acquire " + name,
        "idempotent",
        (rpc, s) => rpc.acquire({ name, leaseId: this.id, waitMs: BigInt(Math.round(opts.waitMs ?? 0)), lockDelayMs: BigInt(Math.round(opts.lockDelayMs ?? 0)), waitId }, { signal: s }),
        signal,
      ),
    );
  }

  /**
   * tryAcquire takes the lock name if it is free now; otherwise it fails at
   * once with code locked or lock-delay. Like acquire, it withdraws a grant
   * whose answer it did not get.
   */
  tryAcquire(name: string, opts: Omit<AcquireOptions, "waitMs"> = {}): Promise<Lock> {
    return this.#acquire(name, opts, "try acquire " + name, (waitId, signal) =>
      this.client.call(
        "try acquire " + name,
        "idempotent",
        (rpc, s) => rpc.tryAcquire({ name, leaseId: this.id, lockDelayMs: BigInt(Math.round(opts.lockDelayMs ?? 0)), waitId }, { signal: s }),
        signal,
      ),
    );
  }

  async #acquire(name: string, opts: { signal?: AbortSignal }, op: string, send: (waitId: bigint, signal: AbortSignal) => Promise<{ holding?: Holding }>): Promise<Lock> {
    if (this.#lost.signal.aborted) throw this.#lost.signal.reason;
    // One attempt per name at a time in this session: a withdrawal must not
    // release a holding a concurrent attempt of the session learned.
    const prev = this.#naming.get(name) ?? Promise.resolve();
    let unlock!: () => void;
    const mine = new Promise<void>((r) => (unlock = r));
    const tail = prev.then(() => mine);
    this.#naming.set(name, tail);
    try {
      await prev;
      const known = this.#held.has(name); // a re-entrant acquire: never withdrawn
      // Stop waiting when the lease may be lost: a later grant is unusable.
      const signal = opts.signal ? AbortSignal.any([opts.signal, this.#lost.signal]) : this.#lost.signal;
      const waitId = newWaitId();
      const sent = now();
      let res: { holding?: Holding };
      try {
        res = await send(waitId, signal);
      } catch (e) {
        let err = e;
        if (!known && !definite(e)) {
          err = await this.#withdraw(name, waitId, e);
        }
        if (this.#lost.signal.aborted) throw this.#lost.signal.reason;
        throw err;
      }
      if (!res.holding) throw new LeaseholdError(Code.Internal, `${op}: the server answered without a holding`);
      if (!this.#renewedAt(sent)) throw this.#lost.signal.reason;
      return this.#hold(res.holding);
    } finally {
      unlock();
      if (this.#naming.get(name) === tail) this.#naming.delete(name);
    }
  }

  /** withdraw cancels the wait waitId after an attempt that failed with err; it returns the error the caller sees. */
  async #withdraw(name: string, waitId: bigint, err: unknown): Promise<unknown> {
    try {
      await this.client.call(
        "withdraw " + name,
        "idempotent",
        (rpc, signal) => rpc.cancelWait({ name, leaseId: this.id, waitId }, { signal }),
        AbortSignal.timeout(cancelWaitTimeoutMs),
      );
    } catch (ce) {
      if (!(ce instanceof LeaseholdError && ce.code === Code.LeaseExpired)) {
        const msg = err instanceof Error ? err.message : String(err);
        return new LeaseholdError(Code.OutcomeUnknown, `${msg}; withdrawing failed too (${ce instanceof Error ? ce.message : String(ce)}): the session may hold "${name}" until it ends`, { cause: err });
      }
    }
    if (err instanceof LeaseholdError && err.code === Code.OutcomeUnknown) {
      return new LeaseholdError(Code.Unavailable, `${err.message}; withdrawn: not holding ${name}`, { cause: err });
    }
    return err;
  }

  /** hold returns the lock of grant h: the one the session knows when the token matches, else a new one replacing an older. */
  #hold(h: Holding): Lock {
    const cur = this.#held.get(h.name);
    if (cur) {
      if (cur.lock.token === h.token && !cur.lock.signal.aborted) return cur.lock;
      cur.end(new LeaseholdError(Code.NotHolder, `the holding with token ${cur.lock.token} ended`));
    }
    const released = new AbortController();
    const entry = {
      lock: undefined as unknown as Lock,
      end: (reason: unknown) => {
        released.abort(reason);
        if (this.#held.get(h.name) === entry) this.#held.delete(h.name);
      },
    };
    const session = this;
    entry.lock = {
      name: h.name,
      token: h.token,
      leaseId: h.leaseId,
      holding: h,
      signal: AbortSignal.any([this.#lost.signal, released.signal]),
      async release(opts: { signal?: AbortSignal } = {}) {
        entry.end(new ReleasedError());
        await session.client.release(h.name, h.leaseId, h.token, opts);
      },
    };
    this.#held.set(h.name, entry);
    return entry.lock;
  }
}

/** definite reports whether err is a refusal that certainly granted nothing. */
function definite(err: unknown): boolean {
  if (!(err instanceof LeaseholdError)) return false;
  switch (err.code) {
    case Code.InvalidArgument:
    case Code.NotHolder:
    case Code.StaleToken:
    case Code.LeaseExpired:
    case Code.LockDelay:
    case Code.Locked:
    case Code.ResourceExhausted:
    case Code.PermissionDenied:
    case Code.NotFound:
      return true;
  }
  return false;
}

/** newWaitId returns a random non-zero wait id. */
function newWaitId(): bigint {
  const b = new BigUint64Array(1);
  for (;;) {
    globalThis.crypto.getRandomValues(b);
    if (b[0] !== 0n) return b[0];
  }
}
