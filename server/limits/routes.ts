import { Elysia } from "elysia";
import { ProblemError } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { ConnectionGate } from "./connections.ts";
import { BUN_TIMER_GRANULARITY_SECONDS, MAX_HEADER_BYTES, MAX_HEADER_FIELDS, MAX_QUERY_BYTES } from "./limits.ts";

/** refuseOversizedRequest answers 414 for a long query string and 431 for large or many headers. */
function refuseOversizedRequest(request: Request): void {
  const url = request.url;
  const question = url.indexOf("?");
  if (question >= 0 && url.length - question - 1 > MAX_QUERY_BYTES) {
    throw new ProblemError(414, "uri-too-long", `The query string is ${url.length - question - 1} bytes; the limit is ${MAX_QUERY_BYTES} bytes (4 KiB).`);
  }
  let bytes = 0;
  let fields = 0;
  let largest = "";
  let largestBytes = 0;
  for (const [name, value] of request.headers) {
    const size = name.length + value.length + 4; // "name: value\r\n"
    bytes += size;
    fields++;
    if (size > largestBytes) {
      largest = name;
      largestBytes = size;
    }
  }
  if (bytes > MAX_HEADER_BYTES || fields > MAX_HEADER_FIELDS) {
    const detail = fields > MAX_HEADER_FIELDS
      ? `The request has ${fields} header fields; the limit is ${MAX_HEADER_FIELDS}.`
      : `The request headers are ${bytes} bytes; the limit is ${MAX_HEADER_BYTES} bytes (8 KiB). The largest is ${largest} (${largestBytes} bytes).`;
    throw new ProblemError(431, "headers-too-large", detail, [{ header: largest, detail: `is ${largestBytes} bytes of ${bytes} in all` }]);
  }
}

/**
 * limitsGuard enforces, before routing and before any body is read: the connection cap (503) and
 * the query string and header size limits (414, 431). Rate limits come after authentication
 * (auth/routes.ts), which knows whose budget a request spends.
 */
export function limitsGuard(rt: Runtime) {
  const { config } = rt;
  const idleHorizonMs = (config.idleTimeoutSeconds + BUN_TIMER_GRANULARITY_SECONDS) * 1000;
  const gate = new ConnectionGate(config.maxConnections, idleHorizonMs, idleHorizonMs + config.bodyTimeoutMs);
  const connectionOf = new WeakMap<Request, string>();

  return new Elysia({ name: "limits" })
    .onRequest(({ request, server }) => {
      const peer = server?.requestIP(request) ?? null;
      if (peer) {
        const connection = `${peer.address}|${peer.port}`;
        if (!gate.admit(connection)) {
          throw new ProblemError(503, "too-many-connections", `The server is serving its limit of ${config.maxConnections} connections. Retry shortly, or reuse a kept-alive connection.`, undefined, {
            "retry-after": "1",
            connection: "close",
          });
        }
        connectionOf.set(request, connection);
        // Bun's idle timer also runs while a body arrives; give the body its own, longer deadline.
        if (request.body && config.bodyTimeoutMs > config.idleTimeoutSeconds * 1000) server!.timeout(request, Math.ceil(config.bodyTimeoutMs / 1000) + 1);
      }
      refuseOversizedRequest(request);
    })
    .onAfterResponse({ as: "global" }, ({ request }) => {
      const connection = connectionOf.get(request);
      if (connection) gate.release(connection, request.headers.get("connection")?.toLowerCase() === "close");
    });
}
