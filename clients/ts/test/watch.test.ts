// The watch's replay from an index and its resync from the state when the
// events are gone, against a real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code, connect, EventType, isCode, type Event, type WatchCompacted } from "../src/index.js";
import { nodeTransport } from "../src/node.js";
import { Server, until } from "./server.js";

describe("watch from an index", () => {
  const server = new Server(["--watch-history", "4"]);
  before(() => server.start());
  after(() => server.close());

  test("replays the held history, resyncs from the state when it is gone", async () => {
    const c = connect({ endpoints: [server.addr], transport: nodeTransport() });
    const s = await c.session({ ttlMs: 30_000 });
    try {
      // Record the index of two events with a first watch.
      const first: Event[] = [];
      const ctl = new AbortController();
      let opens = 0;
      const done = (async () => {
        for await (const ev of c.watch("x:", { signal: ctl.signal, onOpen: () => opens++ })) {
          first.push(ev);
          if (first.length === 2) ctl.abort();
        }
      })();
      await until("the watch registered", () => opens === 1);
      const held = await s.acquire("x:held");
      const one = await s.acquire("x:one");
      await done;

      // Replayed from the server's history: the client sends fromIndex.
      const replay: Event[] = [];
      const ctl2 = new AbortController();
      for await (const ev of c.watch("x:", { signal: ctl2.signal, fromIndex: first[1].index })) {
        replay.push(ev);
        ctl2.abort();
      }
      assert.deepEqual(replay.map((e) => [e.type, e.name, e.token]), [[EventType.ACQUIRED, "x:one", one.token]]);

      // Push both events out of the history (4 events).
      for (const n of ["x:a", "x:b"]) {
        const l = await s.acquire(n);
        await l.release();
      }
      await assert.rejects(
        (async () => {
          for await (const _ of c.watch("x:", { fromIndex: first[0].index })) {
            assert.fail("an event from a compacted index");
          }
        })(),
        (e: unknown) => isCode(e, Code.Compacted),
      );

      // With onCompacted: the state at an index, then the events after it.
      const states: WatchCompacted[] = [];
      const after: Event[] = [];
      const ctl3 = new AbortController();
      const resync = (async () => {
        for await (const ev of c.watch("x:", { signal: ctl3.signal, fromIndex: first[0].index, onCompacted: (st) => states.push(st) })) {
          after.push(ev);
          if (ev.name === "x:last") ctl3.abort();
        }
      })();
      await until("the state", () => states.length === 1);
      const st = states[0];
      assert.deepEqual(
        st.locks.map((l) => [l.name, l.holder?.token]),
        [["x:held", held.token], ["x:one", one.token]],
      );
      await one.release();
      const last = await s.acquire("x:last");
      await resync;
      assert.ok(after.every((e) => e.index > st.index), "every event after the state's index");
      assert.deepEqual(
        after.map((e) => [e.type, e.name, e.token]),
        [[EventType.RELEASED, "x:one", one.token], [EventType.ACQUIRED, "x:last", last.token]],
      );
      await held.release();
    } finally {
      await s.close();
    }
  });
});
