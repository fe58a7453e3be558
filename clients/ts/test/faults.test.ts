// The client when its server stops answering or goes away.
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, test } from "node:test";
import { Code, connect, EventType, isCode, LeaseLostError, type Event } from "../src/index.js";
import { nodeTransport } from "../src/node.js";
import { aborted, metric, Server, until } from "./server.js";

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

  test("sessions created at different times fall into step and share their renewals", async () => {
    const c = connect({ endpoints: [server.addr], transport: nodeTransport() });
    const calls = () => metric(server.addr, 'leasehold_rpc_total{code="ok",method="KeepAlive"}');
    const n = 20;
    const sessions = [];
    const start = performance.now();
    for (let i = 0; i < n; i++) {
      sessions.push(await c.session({ ttlMs: 3000, keepaliveMs: 1000 }));
      await new Promise((r) => setTimeout(r, 10)); // created over 200 ms or more
    }
    const spread = performance.now() - start;
    try {
      await new Promise((r) => setTimeout(r, 1500)); // the first round of renewals
      const d0 = sessions.map((s) => s.deadline);
      const before = await calls();
      const from = performance.now();
      await new Promise((r) => setTimeout(r, 2000)); // two more rounds
      const made = (await calls()) - before;
      const rounds = Math.floor((performance.now() - from) / 1000) + 1; // a window of 2 s or more can catch a third
      sessions.forEach((s, i) => {
        assert.equal(s.signal.aborted, false);
        assert.ok(s.deadline > d0[i] + 1000, `session ${i}'s deadline moved ${s.deadline - d0[i]} ms in 2 s of renewals every second`);
      });
      // Each round makes a call per group of sessions: one group per quarter
      // interval (250 ms) of the time they were created over, at most. A
      // call per session would be 40; a 50 ms window alone leaves a group
      // per 50 ms of it.
      const groups = Math.floor(spread / 250) + 1;
      assert.ok(made >= 1 && made <= rounds * groups, `${made} KeepAlive calls renewed ${n} sessions created over ${Math.round(spread)} ms for 2 s; want 1 to ${rounds * groups}`);
    } finally {
      await Promise.all(sessions.map((s) => s.close()));
    }
  });

  test("a session the server expired is lost at once, the others go on", async () => {
    const c = connect({ endpoints: [server.addr], transport: nodeTransport() });
    const a = await c.session({ ttlMs: 3000, keepaliveMs: 200 });
    const b = await c.session({ ttlMs: 3000, keepaliveMs: 200 });
    try {
      // Another client closes a's session on the server behind a's back.
      const other = connect({ endpoints: [server.addr], transport: nodeTransport() });
      await other.call("close session", "idempotent", (rpc, signal) => rpc.closeSession({ leaseId: a.id }, { signal }));
      const reason = await Promise.race([
        aborted(a.signal),
        new Promise((_, reject) => setTimeout(() => reject(new Error("the expired session's signal never aborted")), 2000)),
      ]);
      assert.ok(reason instanceof LeaseLostError, `reason ${reason}`);
      assert.match(String((reason as Error).message), /expired/);
      assert.ok(performance.now() < a.deadline, "lost on the server's word, before the local deadline");
      const d = b.deadline;
      await until("b renewed", () => b.deadline > d);
      assert.equal(b.signal.aborted, false);
    } finally {
      await b.close();
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

// stallingProxy forwards TCP to target until stall(); then its connections
// stay open and no byte passes, as with a node partitioned away.
async function stallingProxy(target: string): Promise<{ addr: string; stall: () => void; close: () => Promise<void> }> {
  const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
  let stalled = false;
  const sockets = new Set<net.Socket>();
  const srv = net.createServer((client) => {
    const upstream = net.connect(port, host);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    for (const [from, to] of [[client, upstream], [upstream, client]]) {
      sockets.add(from);
      from.on("data", (d) => stalled || to.write(d));
      from.on("close", end);
      from.on("error", end);
    }
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  return {
    addr: `127.0.0.1:${(srv.address() as net.AddressInfo).port}`,
    stall: () => {
      stalled = true;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        srv.close(() => resolve());
      }),
  };
}

describe("a stalled endpoint", () => {
  const server = new Server();
  before(() => server.start());
  after(() => server.close());

  test("an HTTP/2 call waiting on a stalled endpoint goes to the next one", async () => {
    const proxy = await stallingProxy(server.addr);
    const c = connect({
      endpoints: [proxy.addr, server.addr],
      transport: nodeTransport({ httpVersion: "2", pingIntervalMs: 200, pingTimeoutMs: 300 }),
    });
    const s = await c.session({ ttlMs: 10_000 });
    try {
      await (await s.acquire("st:a")).release();
      proxy.stall();
      const start = performance.now();
      const l = await Promise.race([
        s.acquire("st:b"), // no signal of its own
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error("an acquire still waits on a stalled endpoint after 10 s")), 10_000)),
      ]);
      assert.ok(l.token > 0n);
      assert.ok(performance.now() - start < 10_000);
    } finally {
      await proxy.close(); // first: a call on the stalled connection would wait
      await s.close();
    }
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
