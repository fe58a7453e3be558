// The generated code: the public API only, with names that read well.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { LeaseholdService } from "../src/gen/leasehold/v1/leasehold_pb.js";

const gen = resolve(dirname(fileURLToPath(import.meta.url)), "../../src/gen");

test("only proto/leasehold/v1 is generated: no internal FSM types", () => {
  assert.deepEqual(readdirSync(join(gen, "leasehold")), ["v1"]);
  assert.doesNotMatch(readFileSync(join(gen, "leasehold/v1/leasehold_pb.ts"), "utf8"), /leasehold\.fsm/);
});

test("the KV methods are kvPut, kvGet and kvDelete", () => {
  const names = Object.keys(LeaseholdService.method);
  for (const m of ["kvPut", "kvGet", "kvDelete"]) assert.ok(names.includes(m), `${m} in ${names}`);
  assert.equal(names.filter((n) => /^kV/.test(n)).length, 0);
});
