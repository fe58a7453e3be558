// Node's transport: the Connect protocol over Node's http module.
import type { Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

/**
 * nodeTransport is a transport factory for connect({transport}) that uses
 * @connectrpc/connect-node (HTTP/1.1; the server also speaks cleartext
 * HTTP/2 with prior knowledge, pass httpVersion "2" for it).
 */
export function nodeTransport(opts: { httpVersion?: "1.1" | "2" } = {}): (baseUrl: string) => Transport {
  return (baseUrl: string) => createConnectTransport({ baseUrl, httpVersion: opts.httpVersion ?? "1.1" });
}
