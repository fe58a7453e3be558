// The client when its server stops answering or goes away.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code, connect, EventType, isCode, LeaseLostError, type Event } from "../src/index.js";
import { nodeTransport } from "../src/node.js";
import { aborted, Server, until } from "./server.js";

describe("keepalive", () => {
  const server = new Server();
  before(() => server.start());
  after(() => server.close());

  test("renewals keep a lease alive past its TTL", async () => {
    const c = connect({ endpoints: [server.addr], transport: nodeTransport() });
    const s = await c.session({ ttlMs: 1000 });
    try {
      const l = await s.acquire("k:alive");
      const d0 = s.deadline;
      await until("the deadline moved two TTLs on", () => s.deadline > d0 + 2 * s.ttlMs);
      assert.equal(l.signal.aborted, false);
      assert.equal((await c.status("k:alive"))?.holder?.token, l.token);
    } finally {
      await s.close();
    }
  });

  test("the signal aborts at the local deadline when the server stops answering", async () => {
    const c = connect({ endpoints: [server.addr], transport: nodeTransport(), retryTimeoutMs: 2000 });
    const s = await c.session({ ttlMs: 1500 });
    const l = await s.acquire("k:lost");
    server.signal("SIGSTOP"); // every keepalive now hangs
    try {
      const reason = await Promise.race([
        aborted(s.signal),
        new Promise((_, reject) => setTimeout(() => reject(new Error("the session signal never aborted")), 10_000)),
      ]);
      const at = performance.now();
      assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
      assert.ok(at >= s.deadline, "not before the local deadline");
      assert.equal(l.signal.aborted, true);
      assert.ok(l.signal.reason instanceof LeaseLostError);
      await assert.rejects(s.acquire("k:other"), (e: unknown) => e instanceof LeaseLostError);
    } finally {
      server.signal("SIGCONT");
    }
    // The server, answering again, expires the session: the name is free.
    const b = await c.session({ ttlMs: 5000 });
    const lb = await b.acquire("k:lost", { waitMs: 10_000 });
    assert.ok(lb.token > l.token);
    await b.close();
    await assert.rejects(l.release(), (e: unknown) => isCode(e, Code.NotHolder));
  });
});

describe("watch", () => {
  const server = new Server();
  before(() => server.start());
  after(() => server.close());

  test("resumes on the restarted server without repeating events", async () => {
    const c = connect({ endpoints: [server.addr], transport: nodeTransport(), retryTimeoutMs: 30_000 });
    const ctl = new AbortController();
    let opens = 0;
    const resumes: bigint[] = [];
    const events: Event[] = [];
    const done = (async () => {
      for await (const ev of c.watch("r:", { signal: ctl.signal, onOpen: () => opens++, onResume: (i) => resumes.push(i) })) {
        events.push(ev);
        if (ev.name === "r:two") ctl.abort();
      }
    })();
    await until("the watch registered", () => opens === 1);
    const a = await c.session({ ttlMs: 5000 });
    const la = await a.acquire("r:one");
    await until("the first event", () => events.length === 1);
    await a.close(); // releases r:one
    await until("the release event", () => events.length === 2);
    const addr = server.addr;
    await server.stop();
    await server.start(addr);
    await until("the watch registered again", () => opens >= 2, 30_000);
    const b = await c.session({ ttlMs: 5000 });
    const lb = await b.acquire("r:two");
    await done;
    await b.close();
    // Each event once, in log order, across the restart.
    assert.deepEqual(
      events.map((e) => [e.type, e.name, e.token]),
      [
        [EventType.ACQUIRED, "r:one", la.token],
        [EventType.RELEASED, "r:one", la.token],
        [EventType.ACQUIRED, "r:two", lb.token],
      ],
    );
    assert.deepEqual(resumes, [events[1].index], "onResume tells the index of the last event yielded");
  });
});
