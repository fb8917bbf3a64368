import type { Server } from "bun";
import { readFileSync } from "node:fs";
import type { Config } from "../config.ts";
import { canonicalAddress, clientAddress, clientHints, clientNetwork, isTrustedProxy } from "../http/client-address.ts";
import { routedPath } from "../http/request-log.ts";
import { requestSlot } from "../http/request-slot.ts";
import { ProblemError } from "../shared/problem.ts";
import { BUN_TIMER_GRANULARITY_SECONDS } from "./limits.ts";

/** RECONCILE_INTERVAL_MS is the shortest time between two reads of the kernel's connection table (by the gate, or by a drain). */
const RECONCILE_INTERVAL_MS = 50;
/** PROBE_PATHS answer under the connection cap: a load balancer must see the service alive when it is full. */
const PROBE_PATHS = new Set(["/healthz", "/readyz"]);

interface Connection {
  /** the client address whose share the connection counts in; null for a trusted proxy's, which carries anyone's requests */
  client: string | null;
  inFlight: number;
  lastActive: number;
}

/** LivePeers lists the peers (canonicalPeer keys) of the server's established connections, or null when the system cannot tell. */
type LivePeers = () => Set<string> | null;

/** CANONICAL_CACHE_SIZE bounds the addresses whose canonical form is remembered (clients come back with the same few). */
const CANONICAL_CACHE_SIZE = 1024;
const canonicalAddresses = new Map<string, string>();

/** canonicalPeer is the key of one connection: its peer's address and port. */
function canonicalPeer(address: string, port: number): string {
  let canonical = canonicalAddresses.get(address);
  if (canonical === undefined) {
    if (canonicalAddresses.size >= CANONICAL_CACHE_SIZE) canonicalAddresses.clear();
    canonical = canonicalAddress(address);
    canonicalAddresses.set(address, canonical);
  }
  return `${canonical}|${port}`;
}

/** procAddress decodes an address of /proc/net/tcp (IPv4: 8 hex digits) or tcp6 (32), each 32-bit word in host order (little-endian). */
function procAddress(hex: string): string {
  const bytes: number[] = [];
  for (let word = 0; word < hex.length; word += 8) {
    for (let i = 6; i >= 0; i -= 2) bytes.push(Number.parseInt(hex.slice(word + i, word + i + 2), 16));
  }
  if (bytes.length === 4) return bytes.join(".");
  if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) return bytes.slice(12).join(".");
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16).padStart(4, "0"));
  return groups.join(":");
}

/**
 * kernelLivePeers reads Linux's table of TCP sockets (/proc/net/tcp and tcp6, the process's
 * network namespace) for the established connections on a local port. A connection the client has
 * closed is no longer ESTABLISHED there (CLOSE_WAIT, then gone) even before Bun notices. Returns
 * null where there is no such table.
 */
function kernelLivePeers(port: number): Set<string> | null {
  const suffix = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  const peers = new Set<string>();
  let readable = false;
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(file, "latin1");
    } catch {
      continue;
    }
    readable = true;
    for (const line of text.split("\n")) {
      // "  sl  local_address rem_address st ...": state 01 is ESTABLISHED
      const [, local, remote, state] = line.trim().split(/\s+/, 4);
      if (state !== "01" || !local?.endsWith(suffix) || !remote) continue;
      const colon = remote.indexOf(":");
      peers.add(`${procAddress(remote.slice(0, colon))}|${Number.parseInt(remote.slice(colon + 1), 16)}`);
    }
  }
  return readable ? peers : null;
}

/** Admission is the answer for a request: admitted, or which limit refused it (its new connection, or behind a proxy its client's requests). */
type Admission = "admitted" | "over-cap" | "over-share" | "over-requests";

/**
 * ConnectionGate caps the client connections served at once, and those of one client address.
 * Bun.serve 1.4 accepts every TCP connection and reports neither opens nor closes, so the gate
 * learns of a connection from its first request (peer address and port) and counts it until it
 * is gone. When a new connection would pass a limit, the gate first reconciles its count with the
 * kernel's table of established connections (livePeers), so a connection the client closed stops
 * counting the moment it matters; reads are at least RECONCILE_INTERVAL_MS apart, and requests
 * arriving meanwhile wait for the next one rather than being refused. Without a kernel table the
 * count falls back on horizons: a connection is forgotten after it sent `Connection: close` or has
 * been idle longer than Bun keeps idle connections.
 */
class ConnectionGate {
  private readonly open = new Map<string, Connection>();
  private readonly perClient = new Map<string, number>();
  private reconciling: Promise<void> | null = null;
  private lastReconcile = Number.NEGATIVE_INFINITY;

  /**
   * @param max connections served at once
   * @param share connections one client address may hold
   * @param idleHorizonMs how long after its last response an idle connection may still be open
   * @param busyHorizonMs how long a connection with a request in flight may stay silent before it is presumed gone
   * @param livePeers the established connections as the system sees them
   */
  constructor(
    readonly max: number,
    readonly share: number,
    private readonly idleHorizonMs: number,
    private readonly busyHorizonMs: number,
    private readonly livePeers: LivePeers = () => null,
  ) {}

  /**
   * admit records a request on a connection; a new connection past a limit is refused, after one
   * reconciliation (only then is the answer a promise). `clientOf` is asked only for a new
   * connection; null leaves it out of every client's share.
   */
  admit(key: string, clientOf: () => string | null): Admission | Promise<Admission> {
    const first = this.tryAdmit(key, clientOf, performance.now());
    if (first === "admitted") return first;
    return this.reconcile().then(() => this.tryAdmit(key, clientOf, performance.now()));
  }

  /** release records the end of a request; a connection the client asked to close is forgotten. */
  release(key: string, closing: boolean, now = performance.now()): void {
    const connection = this.open.get(key);
    if (!connection) return;
    connection.inFlight = Math.max(0, connection.inFlight - 1);
    connection.lastActive = now;
    if (closing && connection.inFlight === 0) this.forget(key, connection);
  }

  /** size is the number of connections counted as open (after forgetting expired ones). */
  size(now = performance.now()): number {
    this.sweep(now);
    return this.open.size;
  }

  private tryAdmit(key: string, clientOf: () => string | null, now: number): Admission {
    const known = this.open.get(key);
    if (known) {
      known.inFlight++;
      known.lastActive = now;
      return "admitted";
    }
    const client = clientOf();
    const held = () => (client === null ? 0 : (this.perClient.get(client) ?? 0));
    if (this.open.size >= this.max || held() >= this.share) this.sweep(now);
    if (this.open.size >= this.max) return "over-cap";
    if (held() >= this.share) return "over-share";
    this.open.set(key, { client, inFlight: 1, lastActive: now });
    if (client !== null) this.perClient.set(client, held() + 1);
    return "admitted";
  }

  /** reconcile forgets the connections the kernel no longer holds; concurrent callers share one read. */
  private reconcile(): Promise<void> {
    if (!this.reconciling) {
      const wait = Math.max(0, this.lastReconcile + RECONCILE_INTERVAL_MS - performance.now());
      this.reconciling = Bun.sleep(wait).then(() => {
        this.reconciling = null;
        const live = this.livePeers();
        this.lastReconcile = performance.now();
        if (live) {
          for (const [key, connection] of this.open) if (!live.has(key)) this.forget(key, connection);
        }
      });
    }
    return this.reconciling;
  }

  private forget(key: string, connection: Connection): void {
    this.open.delete(key);
    if (connection.client === null) return;
    const held = (this.perClient.get(connection.client) ?? 1) - 1;
    if (held > 0) this.perClient.set(connection.client, held);
    else this.perClient.delete(connection.client);
  }

  private sweep(now: number): void {
    for (const [key, connection] of this.open) {
      if (now - connection.lastActive > (connection.inFlight > 0 ? this.busyHorizonMs : this.idleHorizonMs)) this.forget(key, connection);
    }
  }
}

/**
 * ProxiedRequests counts the requests in flight of each client behind a trusted proxy. A proxy's
 * keep-alive pool carries every client's requests on connections first opened for whichever client
 * came first, so behind it a client's share is of requests at once, not of connections.
 */
class ProxiedRequests {
  private readonly perClient = new Map<string, number>();
  private readonly clientOf = requestSlot<string>("proxied client");

  /** @param share requests one client address may have in flight */
  constructor(readonly share: number) {}

  /** take counts a request for its client; false when the client already has its share in flight. */
  take(request: Request, client: string): boolean {
    const held = this.perClient.get(client) ?? 0;
    if (held >= this.share) return false;
    this.perClient.set(client, held + 1);
    this.clientOf.set(request, client);
    return true;
  }

  /** release gives a request's count back once it is answered. */
  release(request: Request): void {
    const client = this.clientOf.get(request);
    if (client === undefined) return;
    this.clientOf.delete(request);
    const held = (this.perClient.get(client) ?? 1) - 1;
    if (held > 0) this.perClient.set(client, held);
    else this.perClient.delete(client);
  }
}

/** clientShare is how many connections one client address may hold: the setting, or an eighth of the cap. */
function clientShare(config: Config): number {
  return config.maxConnectionsPerClient > 0 ? Math.min(config.maxConnectionsPerClient, config.maxConnections) : Math.max(1, Math.floor(config.maxConnections / 8));
}

function tooManyConnections(detail: string): ProblemError {
  return new ProblemError(503, "too-many-connections", detail, undefined, { "retry-after": "1", connection: "close" });
}

/** ConnectionLimits admits each request's connection and releases it when the answer is sent; a stop drains the connections. */
export interface ConnectionLimits {
  /** admit throws 503 when the request opens a connection past the cap or its client's share (probes excepted); a promise only when it had to wait */
  admit(request: Request, server: Server<unknown> | null, path: string): void | Promise<void>;
  release(request: Request): void;
  /** draining is true from drain() on: every answer then closes its connection (Connection: close) */
  readonly draining: boolean;
  /**
   * drain starts draining, and resolves once no client connection to the server on `port` is left
   * open, or `windowMs` passed, with the number of connections still open.
   */
  drain(port: number, windowMs: number): Promise<number>;
}

/**
 * connectionLimits enforces --max-connections and --max-connections-per-client. A client is its
 * address, the TCP peer, and its share counts its connections; behind a trusted proxy it is each
 * request's forwarded address, and its share counts its requests in flight, while the proxy's
 * connections count toward the cap only. /healthz and /readyz are answered even when refused (uncounted).
 * Its drain tells when the clients' connections are gone: the kernel's table where there is one (it
 * also holds connections that have not sent a request yet), else the connections the gate counts.
 */
export function connectionLimits(config: Config, readPeers: (port: number) => Set<string> | null = kernelLivePeers): ConnectionLimits {
  const idleHorizonMs = (config.idleTimeoutSeconds + BUN_TIMER_GRANULARITY_SECONDS) * 1000;
  let port: number | undefined;
  const livePeers = () => (port === undefined ? null : readPeers(port));
  const gate = new ConnectionGate(config.maxConnections, clientShare(config), idleHorizonMs, idleHorizonMs + config.bodyTimeoutMs, livePeers);
  const connectionOf = requestSlot<string>("connection");
  const proxied = new ProxiedRequests(gate.share);
  let draining = false;
  return {
    admit(request, server, path) {
      const peer = server?.requestIP(request) ?? null;
      if (!peer) return;
      // Read once: each read of server.port is a getsockname call.
      port ??= server!.port;
      const connection = canonicalPeer(peer.address, peer.port);
      const clientOf = () => clientNetwork(clientAddress(clientHints(request, peer.address), config.trustedProxies) ?? canonicalAddress(peer.address));
      const admitted = (admission: Admission) => {
        if (admission === "admitted") connectionOf.set(request, connection);
        else if (PROBE_PATHS.has(routedPath(path))) return;
        else if (admission === "over-requests") {
          // The proxy's connection carries other clients' requests: it stays open.
          throw new ProblemError(503, "too-many-connections", `This client address has its limit of ${proxied.share} requests in flight through the proxy. Retry shortly.`, undefined, {
            "retry-after": "1",
          });
        } else {
          throw tooManyConnections(
            admission === "over-cap"
              ? `The server is serving its limit of ${gate.max} connections. Retry shortly, or reuse a kept-alive connection.`
              : `This client address holds its limit of ${gate.share} connections (of ${gate.max} in all). Retry shortly, or reuse a kept-alive connection.`,
          );
        }
      };
      const viaProxy = isTrustedProxy(peer.address, config.trustedProxies);
      // Counted before the connection: a refusal of the connection still gives the count back (release).
      if (viaProxy && !proxied.take(request, clientOf())) return admitted("over-requests");
      const admission = gate.admit(connection, viaProxy ? () => null : clientOf);
      return typeof admission === "string" ? admitted(admission) : admission.then(admitted);
    },
    release(request) {
      proxied.release(request);
      const connection = connectionOf.get(request);
      if (connection) gate.release(connection, draining || request.headers.get("connection")?.toLowerCase() === "close");
    },
    get draining() {
      return draining;
    },
    async drain(serverPort, windowMs) {
      draining = true;
      const until = performance.now() + windowMs;
      for (;;) {
        const open = readPeers(serverPort)?.size ?? gate.size();
        const left = until - performance.now();
        if (open === 0 || left <= 0) return open;
        await Bun.sleep(Math.min(RECONCILE_INTERVAL_MS, left));
      }
    },
  };
}
