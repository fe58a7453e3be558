// The package as a user installs it: `npm pack`, the tarball installed into
// an empty project (a copy, not a link into this repository), and a lock
// taken through the package's own entry points against a real server.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { lstatSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { Server } from "./server.js";

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

const server = new Server();
const work = mkdtempSync(join(tmpdir(), "leasehold-pack-"));
before(() => server.start());
after(async () => {
  await server.close();
  rmSync(work, { recursive: true, force: true });
});

test("the packed tarball installs into an empty project and takes a lock", () => {
  const npm = (args: string[], cwd: string) => execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8" });
  // npm test compiled dist/ already: pack it as it is (prepack would compile again).
  npm(["pack", "--ignore-scripts", "--pack-destination", work], pkgDir);
  const tarball = readdirSync(work).find((f) => f.endsWith(".tgz"));
  assert.ok(tarball, "npm pack wrote no tarball");
  const app = join(work, "app");
  execFileSync("mkdir", ["-p", app]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  // npm ci cached the dependencies' tarballs but not their registry
  // metadata, which resolving a dependency range needs: take what the cache
  // holds, and the rest from the registry.
  npm(["install", "--prefer-offline", join(work, tarball)], app);
  const installed = join(app, "node_modules", "@leasehold", "client");
  assert.ok(!lstatSync(installed).isSymbolicLink(), "the package is installed as a link into the repository");
  writeFileSync(
    join(app, "main.mjs"),
    `import { connect } from "@leasehold/client";
import { nodeTransport } from "@leasehold/client/node";
const c = connect({ endpoints: [process.argv[2]], transport: nodeTransport() });
const s = await c.session({ ttlMs: 5000, owner: "packed" });
const l = await s.acquire("pack:lock");
console.log(JSON.stringify({ name: l.name, token: l.token.toString() }));
await l.release();
await s.close();
`,
  );
  const out = JSON.parse(execFileSync("node", ["main.mjs", server.addr], { cwd: app, encoding: "utf8" }));
  assert.equal(out.name, "pack:lock");
  assert.ok(BigInt(out.token) > 0n, `token ${out.token}`);
});
