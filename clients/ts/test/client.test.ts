// The client against a real leasehold server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code, connect, EventType, isCode, LeaseholdError, LeaseLostError, ReleasedError, type Client, type Event } from "../src/index.js";
import { Code as RpcCode, ConnectError, type Transport } from "@connectrpc/connect";
import { nodeTransport } from "../src/node.js";
import { Server, until } from "./server.js";

describe("leasehold client", () => {
  const server = new Server();
  let c: Client;
  before(async () => {
    await server.start();
    c = connect({ endpoints: [server.addr], transport: nodeTransport() });
  });
  after(() => server.close());

  test("session, acquire and token", async () => {
    const s = await c.session({ ttlMs: 5000, owner: "worker-A" });
    try {
      assert.equal(s.ttlMs, 5000);
      assert.equal(s.owner, "worker-A");
      assert.ok(s.deadline > performance.now(), "the local deadline is in the future");
      const l = await s.acquire("t:one");
      assert.equal(l.name, "t:one");
      assert.equal(l.leaseId, s.id);
      assert.ok(l.token > 0n);
      assert.equal(l.signal.aborted, false);
      const info = await c.status("t:one");
      assert.equal(info?.holder?.token, l.token);
      assert.equal(info?.holder?.owner, "worker-A");
      const again = await s.acquire("t:one");
      assert.equal(again.token, l.token, "a re-entrant acquire returns the same holding");
    } finally {
      await s.close();
    }
    assert.equal(s.signal.aborted, true);
  });

  test("release frees the name and aborts the lock's signal; the next grant has a larger token", async () => {
    const a = await c.session({ ttlMs: 5000 });
    const b = await c.session({ ttlMs: 5000 });
    try {
      const la = await a.acquire("t:rel");
      await la.release();
      assert.ok(la.signal.reason instanceof ReleasedError);
      assert.equal((await c.status("t:rel"))?.holder, undefined);
      const lb = await b.acquire("t:rel");
      assert.ok(lb.token > la.token);
      await assert.rejects(la.release(), (e: unknown) => isCode(e, Code.NotHolder));
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("tryAcquire of a held name fails with code locked", async () => {
    const a = await c.session({ ttlMs: 5000 });
    const b = await c.session({ ttlMs: 5000 });
    try {
      const la = await a.tryAcquire("t:busy");
      await assert.rejects(b.tryAcquire("t:busy"), (e: unknown) => e instanceof LeaseholdError && e.code === Code.Locked && e.fromServer);
      await la.release();
      const lb = await b.tryAcquire("t:busy");
      assert.ok(lb.token > la.token);
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("acquire with waitMs gives up with deadline-exceeded and leaves no queue entry", async () => {
    const a = await c.session({ ttlMs: 5000 });
    const b = await c.session({ ttlMs: 5000 });
    try {
      await a.acquire("t:wait");
      await assert.rejects(b.acquire("t:wait", { waitMs: 200 }), (e: unknown) => isCode(e, Code.DeadlineExceeded));
      assert.deepEqual((await c.status("t:wait"))?.waiters, []);
      const ctl = new AbortController();
      const p = b.acquire("t:wait", { signal: ctl.signal });
      await until("b queued", async () => ((await c.status("t:wait"))?.waiters.length ?? 0) === 1);
      ctl.abort();
      await assert.rejects(p, (e: unknown) => isCode(e, Code.Canceled));
      await until("b withdrawn", async () => ((await c.status("t:wait"))?.waiters.length ?? 1) === 0);
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("the seed scenario: a late write and a late release are refused", async () => {
    const a = await c.session({ ttlMs: 1000, owner: "worker-A" });
    const b = await c.session({ ttlMs: 10_000, owner: "worker-B" });
    try {
      const la = await a.acquire("report:417:rebuild");
      // A pauses: it stops renewing, and its signal says so at once.
      await a.orphan();
      assert.ok(la.signal.reason instanceof LeaseLostError);
      const lb = await b.acquire("report:417:rebuild", { waitMs: 10_000 }); // granted once A expires
      assert.ok(lb.token > la.token, `B's token ${lb.token} > A's ${la.token}`);
      await c.kvPut("report:417", "v2", lb.token);
      const late = await c.kvPut("report:417", "v1", la.token).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(late instanceof LeaseholdError, `A's late write: ${late}`);
      assert.equal(late.code, Code.StaleToken);
      assert.equal(late.lastToken, lb.token);
      assert.match(late.message, /^leasehold: stale-token: kv put: /);
      await assert.rejects(la.release(), (e: unknown) => isCode(e, Code.NotHolder));
      const got = await c.kvGet("report:417");
      assert.equal(new TextDecoder().decode(got.value), "v2");
      assert.equal(got.token, lb.token);
      await assert.rejects(c.kvPut("report:417", "again", lb.token, { strict: true }), (e: unknown) => isCode(e, Code.StaleToken));
      await c.kvDelete("report:417", lb.token);
      await assert.rejects(c.kvGet("report:417"), (e: unknown) => isCode(e, Code.NotFound));
    } finally {
      await b.close();
    }
  });

  test("watch yields the events of the prefix in log order", async () => {
    const ctl = new AbortController();
    let opened!: () => void;
    const open = new Promise<void>((r) => (opened = r));
    const events: Event[] = [];
    const done = (async () => {
      for await (const ev of c.watch("w:", { signal: ctl.signal, onOpen: opened })) {
        events.push(ev);
        if (events.length === 3) ctl.abort();
      }
    })();
    await open;
    const a = await c.session({ ttlMs: 5000 });
    try {
      const l = await a.acquire("w:x");
      await a.acquire("other:y"); // not under the prefix
      await l.release();
      const l2 = await a.acquire("w:x");
      await done;
      assert.deepEqual(
        events.map((e) => [e.type, e.name, e.token]),
        [
          [EventType.ACQUIRED, "w:x", l.token],
          [EventType.RELEASED, "w:x", l.token],
          [EventType.ACQUIRED, "w:x", l2.token],
        ],
      );
      assert.ok(events[0].index < events[1].index && events[1].index < events[2].index);
    } finally {
      await a.close();
    }
  });

  test("bad input is a typed error and changes nothing", async () => {
    await assert.rejects(c.kvPut("a key with spaces", "v", 1n), (e: unknown) => isCode(e, Code.InvalidArgument));
    await assert.rejects(c.release("t:none", "no-such-lease", 1n), (e: unknown) => isCode(e, Code.InvalidArgument));
    await assert.rejects(c.release("t:none", "0".repeat(32), 1n), (e: unknown) => isCode(e, Code.NotHolder));
    await assert.rejects(c.session({ drift: 1 }), (e: unknown) => isCode(e, Code.InvalidArgument));
  });

  test("the fetch transport (browsers) speaks to the same server", async () => {
    const web = connect({ endpoints: `http://${server.addr}` });
    const s = await web.session({ ttlMs: 5000 });
    try {
      const l = await s.tryAcquire("t:web");
      await web.kvPut("t:web", new Uint8Array([1, 2]), l.token);
      assert.deepEqual((await web.kvGet("t:web")).value, new Uint8Array([1, 2]));
    } finally {
      await s.close();
    }
  });

  test("a server that is not there fails fast with unavailable; a live endpoint after it serves", async () => {
    const stopped = new Server();
    await stopped.start();
    const addr = stopped.addr;
    await stopped.close();
    const dead = connect({ endpoints: [addr], transport: nodeTransport() });
    await assert.rejects(dead.kvGet("k"), (e: unknown) => e instanceof LeaseholdError && e.code === Code.Unavailable && e.message.includes("no server at " + addr));
    // With a live endpoint after the dead one, calls move on to it.
    const both = connect({ endpoints: [addr, server.addr], transport: nodeTransport() });
    const s = await both.session({ ttlMs: 5000 });
    const l = await s.tryAcquire("t:failover");
    await both.kvPut("t:failover", "v", l.token);
    assert.equal((await both.kvGet("t:failover")).token, l.token);
    await s.close();
  });

  test("a leader the client cannot reach is tried once, not after every answer", async () => {
    const stopped = new Server();
    await stopped.start();
    const gone = stopped.addr;
    await stopped.close();
    // The live endpoint answers as a follower naming the gone one as the leader.
    let toGone = 0;
    const transport = (baseUrl: string): Transport => {
      const t = nodeTransport()(baseUrl);
      if (baseUrl.endsWith(gone)) {
        return {
          unary: (...a) => {
            toGone++;
            return t.unary(...a);
          },
          stream: (...a) => {
            toGone++;
            return t.stream(...a);
          },
        };
      }
      return {
        unary: async (...a) => {
          const res = await t.unary(...a);
          res.header.set("Leasehold-Leader", gone);
          return res;
        },
        stream: (...a) => t.stream(...a),
      };
    };
    const c2 = connect({ endpoints: [server.addr, gone], transport });
    for (let i = 0; i < 10; i++) {
      await c2.status("t:far");
    }
    assert.equal(toGone, 1, "calls sent to the unreachable leader");
  });

  test("a leader that refused a call (as during an election) is followed when named", async () => {
    // Two endpoints of the same server: the first (B) refuses its first call
    // as not-leader, the second (A) answers naming B's address as the leader.
    let made = 0;
    let toB = 0;
    const transport = (baseUrl: string): Transport => {
      const t = nodeTransport()(baseUrl);
      if (made++ === 0) {
        return {
          unary: (...a) => {
            if (toB++ === 0) {
              return Promise.reject(new ConnectError("this node does not lead", RpcCode.FailedPrecondition, new Headers({ "Leasehold-Code": Code.NotLeader })));
            }
            return t.unary(...a);
          },
          stream: (...a) => t.stream(...a),
        };
      }
      return {
        unary: async (...a) => {
          const res = await t.unary(...a);
          res.header.set("Leasehold-Leader", server.addr);
          return res;
        },
        stream: (...a) => t.stream(...a),
      };
    };
    const c2 = connect({ endpoints: ["http://" + server.addr, server.addr], transport });
    for (let i = 0; i < 3; i++) {
      await c2.status("t:refused");
    }
    assert.equal(toB, 3, "calls to the endpoint that refused once, then was named the leader");
  });
});
