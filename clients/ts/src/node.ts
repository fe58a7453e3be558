// Node's transport: the Connect protocol over Node's http module.
import type { Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

/**
 * nodeTransport is a transport factory for connect({transport}) that uses
 * @connectrpc/connect-node (HTTP/1.1; the server also speaks cleartext
 * HTTP/2 with prior knowledge, pass httpVersion "2" for it).
 *
 * Over HTTP/2 a connection with calls open that has received nothing for
 * pingIntervalMs (default 5000) is sent a PING, and one whose PING is not
 * answered within pingTimeoutMs (default 5000) is closed with its calls,
 * which then go to the next endpoint: a call does not wait on a stalled
 * node (partitioned away, the connection open but silent) until its
 * signal aborts. HTTP/1.1 has no such check.
 */
export function nodeTransport(
  opts: { httpVersion?: "1.1" | "2"; pingIntervalMs?: number; pingTimeoutMs?: number } = {},
): (baseUrl: string) => Transport {
  if (opts.httpVersion === "2") {
    const ping = { pingIntervalMs: opts.pingIntervalMs ?? 5000, pingTimeoutMs: opts.pingTimeoutMs ?? 5000 };
    return (baseUrl: string) => createConnectTransport({ baseUrl, httpVersion: "2", ...ping });
  }
  return (baseUrl: string) => createConnectTransport({ baseUrl, httpVersion: "1.1" });
}
