// Renewals of a Client's sessions: one loop per Client renews every live
// session with KeepAlive calls that carry up to maxBatch lease ids each.
// When a call is sent, every session whose renewal is due within a quarter
// of its keepalive interval (at least coalesceMs) goes with it, renewed a
// little early: sessions created at different times fall into step after
// one round and share calls from then on.
import type { Client } from "./client.js";
import { Code, LeaseholdError } from "./errors.js";

/** maxBatch bounds the lease ids of one KeepAlive call (the server takes 10,000). */
const maxBatch = 1000;
/** coalesceMs: renewals due this soon join the call sent now (or within a quarter of their interval, when longer). */
const coalesceMs = 50;
/** retryMs bounds the wait before a renewal that was not confirmed is sent again. */
const retryMs = 200;

/** now is a monotonic clock in milliseconds. */
export const now = () => performance.now();

/** Renewal is one session as its Client's keeper sees it. */
export interface Renewal {
  readonly id: string;
  readonly keepaliveMs: number;
  /** next is when the next renewal is due (now() time). */
  next: number;
  /** inflight: a call carrying this renewal has not ended yet. */
  inflight: boolean;
  /** deadline is the session's local safe deadline. */
  deadline(): number;
  /** renewed records a renewal confirmed for a call sent at sent. */
  renewed(sent: number): void;
  /** expired: the server no longer has the session. */
  expired(e: LeaseholdError): void;
}

const keepers = new WeakMap<Client, Keeper>();

/** keeperOf returns c's keeper, made on first use. */
export function keeperOf(c: Client): Keeper {
  let k = keepers.get(c);
  if (!k) {
    k = new Keeper(c);
    keepers.set(c, k);
  }
  return k;
}

/**
 * Keeper renews the sessions added to it until they are removed. Each call
 * is one attempt with a short deadline (the least, over its sessions, of
 * the keepalive interval and the time left before the local deadline), so
 * one hung call cannot use up the time left for retries. A call that fails
 * (after the Client's failover between endpoints), or a renewal refused
 * with any code but lease-expired, is sent again within retryMs; each
 * session's local deadline decides. lease-expired is final.
 */
export class Keeper {
  readonly #client: Client;
  readonly #renewals = new Set<Renewal>();
  #running = false;
  #wake: (() => void) | undefined; // ends the loop's current wait

  constructor(client: Client) {
    this.#client = client;
  }

  /** add starts renewing r; its first renewal is due at r.next. */
  add(r: Renewal): void {
    this.#renewals.add(r);
    if (this.#running) {
      this.#poke();
      return;
    }
    this.#running = true;
    void this.#loop();
  }

  /** remove stops renewing r; a call already carrying it still ends. */
  remove(r: Renewal): void {
    if (this.#renewals.delete(r)) this.#poke();
  }

  #poke(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  async #loop(): Promise<void> {
    while (this.#renewals.size > 0) {
      const t = now();
      const due: Renewal[] = [];
      const soon: Renewal[] = []; // they go with the due ones, if any
      let wakeAt = Infinity;
      for (const r of this.#renewals) {
        if (r.inflight) continue;
        if (r.next <= t) due.push(r);
        else if (r.next <= t + Math.max(coalesceMs, r.keepaliveMs / 4)) soon.push(r);
        else wakeAt = Math.min(wakeAt, r.next);
      }
      for (const r of soon) {
        if (due.length > 0) due.push(r);
        else wakeAt = Math.min(wakeAt, r.next);
      }
      for (let i = 0; i < due.length; i += maxBatch) {
        void this.#renew(due.slice(i, i + maxBatch));
      }
      // Until the next renewal is due, or a call ends, or the set changes.
      await new Promise<void>((resolve) => {
        const timer = wakeAt === Infinity ? undefined : setTimeout(() => this.#poke(), Math.max(wakeAt - now(), 0));
        this.#wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    this.#running = false;
  }

  async #renew(batch: Renewal[]): Promise<void> {
    const sent = now();
    let attempt = Infinity;
    for (const r of batch) {
      r.inflight = true;
      attempt = Math.min(attempt, r.keepaliveMs, r.deadline() - sent);
    }
    let results: { leaseId: string; errorCode: string }[] | undefined;
    try {
      const res = await this.#client.call(
        "keepalive",
        "idempotent",
        (rpc, signal) => rpc.keepAlive({ leaseIds: batch.map((r) => r.id) }, { signal }),
        AbortSignal.timeout(Math.max(Math.floor(attempt), 1)),
      );
      if (res.results.length === batch.length) results = res.results;
    } catch {
      // Not confirmed: each renewal is sent again soon; its deadline decides.
    }
    const t = now();
    batch.forEach((r, i) => {
      r.inflight = false;
      const res = results?.[i];
      const code = res && res.leaseId === r.id ? res.errorCode : Code.Unavailable;
      if (code === "") {
        r.renewed(sent);
        r.next = sent + r.keepaliveMs;
      } else if (code === Code.LeaseExpired) {
        this.#renewals.delete(r);
        r.expired(new LeaseholdError(Code.LeaseExpired, "keepalive: the server expired the session"));
      } else {
        r.next = t + Math.min(r.keepaliveMs, retryMs);
      }
    });
    this.#poke();
  }
}
