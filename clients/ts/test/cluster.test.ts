// The client against a real 3-node leasehold cluster.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { connect } from "../src/index.js";
import { nodeTransport } from "../src/node.js";
import { metric, type Server, startCluster, until } from "./server.js";

describe("leasehold client on a cluster", () => {
  let nodes: Server[] = [];
  before(async () => {
    nodes = await startCluster(3);
  });
  after(() => Promise.all(nodes.map((n) => n.close())));

  test("a follower's answer sends the client's next calls to the leader", async () => {
    let leader: Server | undefined;
    await until("a leader", async () => {
      for (const n of nodes) {
        if ((await metric(n.addr, "leasehold_is_leader")) === 1) leader = n;
      }
      return leader !== undefined;
    });
    const fs = nodes.filter((n) => n !== leader);
    // The client is given follower, follower, leader: its first call goes to
    // the first follower, which forwards it and names the leader.
    const c = connect({ endpoints: [fs[0].addr, fs[1].addr, leader!.addr], transport: nodeTransport() });
    const before0 = await metric(fs[0].addr, "leasehold_forwarded_total");
    const before1 = await metric(fs[1].addr, "leasehold_forwarded_total");
    const s = await c.session({ ttlMs: 10_000 });
    const pairs = 30;
    for (let i = 0; i < pairs; i++) {
      const l = await s.acquire(`lead:${i}`);
      await l.release();
    }
    await s.close();
    const n0 = (await metric(fs[0].addr, "leasehold_forwarded_total")) - before0;
    const n1 = (await metric(fs[1].addr, "leasehold_forwarded_total")) - before1;
    assert.ok(n0 >= 1, "the first call went to the first follower, which forwarded it");
    assert.ok(n0 <= 2, `the follower forwarded ${n0} of ${2 * pairs + 2} calls; want the client at the leader after the first`);
    assert.equal(n1, 0, "the other follower forwarded calls");
  });
});
