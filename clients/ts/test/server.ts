// A real leasehold server for the tests: built once from this repository,
// started on a free loopback port with a temporary data dir, stopped by PID.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
let built: string | undefined;

/** binary returns the leasehold binary: $LEASEHOLD_BIN, or one built once from the repository. */
export function binary(): string {
  if (process.env.LEASEHOLD_BIN) return process.env.LEASEHOLD_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "leasehold-bin-"));
    built = join(dir, "leasehold");
    execFileSync("go", ["build", "-o", built, "./cmd/leasehold"], { cwd: repoRoot, stdio: "inherit" });
  }
  return built;
}

/** Server is one running `leasehold serve`. */
export class Server {
  readonly dataDir: string;
  addr = "";
  #proc: ChildProcess | undefined;
  #log = "";
  #exited: Promise<void> = Promise.resolve();

  readonly #flags: string[];

  /** flags are extra `serve` flags, such as ["--watch-history", "4"]. */
  constructor(flags: string[] = []) {
    this.dataDir = mkdtempSync(join(tmpdir(), "leasehold-data-"));
    this.#flags = flags;
  }

  /** start runs the server (on listen, default a free port) and waits until it is ready. */
  async start(listen = "127.0.0.1:0"): Promise<void> {
    const proc = spawn(binary(), ["serve", "--data", this.dataDir, "--listen", listen, ...this.#flags], { stdio: ["ignore", "pipe", "pipe"] });
    this.#proc = proc;
    // If the test process ends without stopping it, the server goes too.
    const orphaned = () => {
      if (proc.exitCode === null && proc.pid !== undefined) process.kill(proc.pid, "SIGKILL");
    };
    process.once("exit", orphaned);
    this.#exited = new Promise((r) =>
      proc.once("exit", () => {
        process.removeListener("exit", orphaned);
        r();
      }),
    );
    const onData = (b: Buffer) => {
      this.#log += b.toString();
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const m = /msg="leasehold serving" api=(\S+)/.exec(this.#log);
      if (m) {
        this.addr = m[1];
        break;
      }
      if (proc.exitCode !== null || Date.now() > deadline) throw new Error("leasehold serve did not start:\n" + this.#log);
      await new Promise((r) => setTimeout(r, 20));
    }
    for (;;) {
      try {
        const res = await fetch(`http://${this.addr}/readyz`);
        if (res.status === 200) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error("leasehold serve not ready:\n" + this.#log);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** signal sends sig to the server's PID. */
  signal(sig: NodeJS.Signals): void {
    if (this.#proc?.pid !== undefined && this.#proc.exitCode === null) process.kill(this.#proc.pid, sig);
  }

  /** stop ends the server (SIGTERM, SIGKILL after 10 s) and waits for it to exit. */
  async stop(): Promise<void> {
    if (!this.#proc || this.#proc.exitCode !== null || this.#proc.signalCode !== null) return;
    this.signal("SIGCONT");
    this.signal("SIGTERM");
    const t = setTimeout(() => this.signal("SIGKILL"), 10_000);
    await this.#exited;
    clearTimeout(t);
  }

  /** close stops the server and removes its data dir. */
  async close(): Promise<void> {
    await this.stop();
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** freePorts returns n distinct loopback ports nothing listens on now: all n are held open until the last is chosen. */
async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from({ length: n }, () => {
      const srv = createServer();
      return new Promise<typeof srv>((resolve, reject) => {
        srv.once("error", reject);
        srv.listen(0, "127.0.0.1", () => resolve(srv));
      });
    }),
  );
  const ports = servers.map((srv) => {
    const addr = srv.address();
    if (typeof addr !== "object" || !addr) throw new Error("no port");
    return addr.port;
  });
  await Promise.all(servers.map((srv) => new Promise((r) => srv.close(r))));
  return ports;
}

/**
 * startCluster starts a new cluster of n voters on loopback and waits until each is ready.
 * Every node's API and Raft ports come from one batch of free ports: a node that chose its
 * API port itself could take a port another node is about to bind for Raft. A port some
 * other process took meanwhile fails that start; the cluster is then started again on new
 * ports, at most three times in all.
 */
export async function startCluster(n: number): Promise<Server[]> {
  for (let attempt = 1; ; attempt++) {
    const ports = await freePorts(2 * n);
    const raft = Array.from({ length: n }, (_, i) => ({ id: `n${i + 1}`, api: `127.0.0.1:${ports[2 * i]}`, addr: `127.0.0.1:${ports[2 * i + 1]}` }));
    const bootstrap = raft.map((r) => `${r.id}=${r.addr}`).join(",");
    const nodes = raft.map((r) => new Server(["--node-id", r.id, "--raft-addr", r.addr, "--bootstrap", bootstrap]));
    const started = await Promise.allSettled(nodes.map((s, i) => s.start(raft[i].api)));
    const failed = started.find((r) => r.status === "rejected");
    if (!failed) return nodes;
    await Promise.all(nodes.map((s) => s.close()));
    if (attempt >= 3 || !String(failed.reason).includes("address already in use")) throw failed.reason;
  }
}

/** metric returns the value of the sample named name (labels included) on server addr's /metrics, 0 when absent. */
export async function metric(addr: string, name: string): Promise<number> {
  const text = await (await fetch(`http://${addr}/metrics`)).text();
  for (const line of text.split("\n")) {
    if (line.startsWith(name + " ")) return Number(line.slice(name.length + 1));
  }
  return 0;
}

/** until resolves when cond() holds, polling, or rejects after ms. */
export async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** aborted resolves with the signal's reason when it aborts. */
export function aborted(signal: AbortSignal): Promise<unknown> {
  return new Promise((r) => {
    if (signal.aborted) r(signal.reason);
    else signal.addEventListener("abort", () => r(signal.reason), { once: true });
  });
}
