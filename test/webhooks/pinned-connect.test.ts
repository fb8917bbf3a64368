import { describe, expect, test } from "bun:test";
import { dlopen, FFIType, ptr } from "bun:ffi";
import { createSocket } from "node:dgram";
import dns from "node:dns";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createSecureServer } from "node:http2";
import { createServer } from "node:https";
import { connect, createServer as createTcpServer, type AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { recentFailures } from "../../console/subscriptions/health.ts";
import { validation } from "../foundation/support.ts";
import { MAX_ADDRESSES_PER_ATTEMPT } from "../../server/limits/limits.ts";
import { createLogger } from "../../server/shared/log.ts";
import { addressesToTry, cachedResolver, resolveTarget, systemLookup, type Resolver } from "../../server/webhooks/targets.ts";
import { settledDeliveries, startReceiver, waitFor, webhookTestScope, type Receiver, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
let h: WebhookHarness;

const CERT = readFileSync(join(import.meta.dir, "fixtures/receiver-cert.pem"), "utf8");
const KEY = readFileSync(join(import.meta.dir, "fixtures/receiver-key.pem"), "utf8");

/** answering returns a resolver that gives the listed answers in turn (the last one from then on) and counts its calls. */
function answering(...answers: string[][]): Resolver & { calls: string[] } {
  const calls: string[] = [];
  const resolve = async (hostname: string) => {
    calls.push(hostname);
    return answers[Math.min(calls.length, answers.length) - 1]!;
  };
  return Object.assign(resolve, { calls });
}

/** SilentNameServer is a real name server on 127.0.0.1 that reads queries and never answers, as a target's owner may run one. */
interface SilentNameServer {
  /** asked holds every name it was asked */
  asked: Set<string>;
  /** close stops it: lookups still waiting fail at their next try (connection refused) */
  close(): void;
  /** restore points the resolver back at the system's name servers */
  restore(): void;
}

/** questionName reads the name a DNS query asks about (RFC 1035: labels after the 12-byte header). */
function questionName(query: Buffer): string {
  const labels: string[] = [];
  for (let at = 12; query[at]; at += query[at]! + 1) labels.push(query.subarray(at + 1, at + 1 + query[at]!).toString());
  return labels.join(".");
}

/** silentNameServer starts a SilentNameServer and points the service's resolver at it: c-ares's servers are the process's, as /etc/resolv.conf is the machine's. */
async function silentNameServer(): Promise<SilentNameServer> {
  const socket = createSocket("udp4");
  const asked = new Set<string>();
  socket.on("message", (query) => asked.add(questionName(query)));
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  const servers = dns.getServers();
  dns.setServers([`127.0.0.1:${socket.address().port}`]);
  let open = true;
  return {
    asked,
    close() {
      if (open) socket.close();
      open = false;
    },
    restore: () => dns.setServers(servers),
  };
}

/** Blackhole is a port on a loopback address that takes no connection and refuses none, as an address that drops packets. */
interface Blackhole {
  /** close stops it: connections still waiting are refused at their next try */
  close(): void;
}

/**
 * blackhole listens on `address`:`port` and never accepts: once one connection waits in its queue
 * (a backlog of 0), Linux drops every further SYN unanswered, so connects stay pending as to a
 * blackholed IPv6 address. Bun's listeners accept every connection, so the socket is libc's.
 */
async function blackhole(address: string, port: number): Promise<Blackhole> {
  const libc = dlopen("libc.so.6", {
    socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
    bind: { args: [FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
    listen: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
    close: { args: [FFIType.i32], returns: FFIType.i32 },
  });
  const AF_INET = 2;
  const SOCK_STREAM = 1;
  const fd = libc.symbols.socket(AF_INET, SOCK_STREAM, 0);
  // struct sockaddr_in: family (host order), port and address (network order), 8 bytes of padding.
  const sockaddr = new Uint8Array(16);
  new DataView(sockaddr.buffer).setUint16(0, AF_INET, true);
  new DataView(sockaddr.buffer).setUint16(2, port);
  sockaddr.set(address.split(".").map(Number), 4);
  expect([libc.symbols.bind(fd, ptr(sockaddr), sockaddr.length), libc.symbols.listen(fd, 0)]).toEqual([0, 0]);
  const filler = connect({ host: address, port });
  await new Promise((resolve) => filler.once("connect", resolve));
  return {
    close() {
      filler.destroy();
      libc.symbols.close(fd);
      libc.close();
    },
  };
}

const createContact = async () => expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", email: "ada@example.com" } })).status).toBe(201);

/**
 * deliverToMisnamedCertificate delivers one event, with no retry, to https://other.example.test/,
 * a name resolving to `addresses`, while an https receiver on 127.0.0.1 presents a certificate that
 * does not name it; it returns the settled delivery, the requests the receiver got and its port.
 */
async function deliverToMisnamedCertificate(addresses: string[]): Promise<{ delivery: any; reached: number; port: number }> {
  h = await scope.harness({ retrySchedule: [] }, { network: { resolve: answering(addresses), ca: CERT } });
  let reached = 0;
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, tls: { cert: CERT, key: KEY }, fetch: () => (reached++, new Response("ok")) });
  try {
    await h.subscribe(`https://other.example.test:${server.port}/hook`, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    return { delivery, reached, port: server.port! };
  } finally {
    await server.stop(true);
  }
}

/**
 * deliverToClosedPort delivers one event, with no retry, to http://names.example.test on a port
 * nothing listens on, a name resolving to `addresses`; it returns the settled delivery, its
 * attempts (status and error) and the port.
 */
async function deliverToClosedPort(addresses: string[]): Promise<{ delivery: any; attempts: { status: number | null; error: string | null }[]; port: string }> {
  h = await scope.harness({ retrySchedule: [] }, { network: { resolve: answering(addresses) } });
  const closed = startReceiver();
  const port = new URL(closed.url).port;
  await closed.stop();
  await h.subscribe(`http://names.example.test:${port}/hook`, ["contact.created"]);
  await createContact();
  const [delivery] = await settledDeliveries(h);
  const attempts = (await h.delivery(delivery.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }));
  return { delivery, attempts, port };
}

/** expectDeliveredAtOnce checks that the one delivery to http://dual.example.test:`port` succeeded at its first attempt, `r` getting it with that Host header. */
async function expectDeliveredAtOnce(r: Receiver, port: string): Promise<void> {
  const [delivery] = await settledDeliveries(h);
  const attempts = (await h.delivery(delivery.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }));
  expect({ status: delivery.status, attempts, hosts: r.received.map((x) => x.headers.host) }).toEqual({
    status: "succeeded",
    attempts: [{ status: 200, error: null }],
    hosts: [`dual.example.test:${port}`],
  });
}

describe("pinned connect: happy paths", () => {
  test("a delivery connects to the address resolved, once per attempt, with the original Host header", async () => {
    const resolve = answering(["127.0.0.1"]);
    h = await scope.harness({ retrySchedule: [0.02] }, { network: { resolve } });
    const r = scope.receiver();
    r.respond((_, i) => new Response(i === 0 ? "busy" : "ok", { status: i === 0 ? 503 : 200 }));
    const port = new URL(r.url).port;
    await h.subscribe(`http://hooks.example.test:${port}/hook?tenant=7`, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({ status: "succeeded", attempts: 2, last_response_status: 200, last_error: null });
    expect(r.received.map((x) => [x.path, x.headers.host])).toEqual([
      ["/hook", `hooks.example.test:${port}`],
      ["/hook", `hooks.example.test:${port}`],
    ]);
    expect(resolve.calls).toEqual(["hooks.example.test", "hooks.example.test"]);
  });

  test("https: the TLS server name and the certificate check use the original host name, not the address", async () => {
    h = await scope.harness({}, { network: { resolve: answering(["127.0.0.1"]), ca: CERT } });
    const hosts: string[] = [];
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      tls: { cert: CERT, key: KEY },
      fetch(request) {
        hosts.push(request.headers.get("host")!);
        return new Response("ok");
      },
    });
    try {
      await h.subscribe(`https://hooks.example.test:${server.port}/hook`, ["contact.created"]);
      await createContact();
      const [delivery] = await settledDeliveries(h);
      expect(delivery).toMatchObject({ status: "succeeded", last_response_status: 200 });
      expect(hosts).toEqual([`hooks.example.test:${server.port}`]);
    } finally {
      await server.stop(true);
    }
  });

  test("https: a name written with its root dot is sent without it as the TLS server name", async () => {
    h = await scope.harness({}, { network: { resolve: answering(["127.0.0.1"]), ca: CERT } });
    const serverNames: unknown[] = [];
    const server = createServer({ cert: CERT, key: KEY }, (request, response) => {
      serverNames.push((request.socket as TLSSocket).servername);
      response.end("ok");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      await h.subscribe(`https://hooks.example.test.:${(server.address() as AddressInfo).port}/hook`, ["contact.created"]);
      await createContact();
      const [delivery] = await settledDeliveries(h);
      expect(delivery).toMatchObject({ status: "succeeded", last_response_status: 200 });
      expect(serverNames).toEqual(["hooks.example.test"]);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("pinned connect: security", () => {
  test("DNS rebinding: a name that is public at the check and 127.0.0.1 at connect time reaches nothing; the log names the address, the record its kind", async () => {
    const resolve = answering(["93.184.216.34"], ["127.0.0.1"]);
    const logs: any[] = [];
    h = await scope.harness({ allowPrivateTargets: false, retrySchedule: [] }, { network: { resolve }, log: createLogger("warn", (line) => logs.push(JSON.parse(line))) });
    const r = scope.receiver();
    await h.subscribe(`http://rebind.example.test:${new URL(r.url).port}/hook`, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery).toMatchObject({
      status: "failed",
      last_response_status: null,
      last_error: "refused: host rebind.example.test resolves to a loopback address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists",
    });
    const detail = await h.delivery(delivery.id);
    expect(detail.attempt_history.map((a: any) => [a.response_status, a.response_body])).toEqual([[null, null]]);
    expect(r.received).toEqual([]);
    expect(resolve.calls).toEqual(["rebind.example.test", "rebind.example.test"]);
    expect(logs.filter((line) => line.msg.startsWith("webhook attempt refused")).map(({ time, ...line }) => line)).toEqual([
      {
        level: "warn",
        msg: "webhook attempt refused: its target's name resolves to a non-public address",
        delivery_id: delivery.id,
        subscription_id: delivery.subscription_id,
        target_host: `rebind.example.test:${new URL(r.url).port}`,
        address: "127.0.0.1",
      },
    ]);
  });

  test("with the switch listing networks, an attempt reaches an address in them and is refused one outside, though the name was inside at creation", async () => {
    const resolve = answering(["127.0.0.1"], ["127.0.0.1"], ["127.0.0.2"]);
    h = await scope.harness({ allowPrivateTargets: ["127.0.0.1/32"], retrySchedule: [0.02] }, { network: { resolve } });
    const r = scope.receiver();
    r.respond((_, i) => new Response(i === 0 ? "busy" : "ok", { status: i === 0 ? 503 : 200 }));
    await h.subscribe(`http://inside.example.test:${new URL(r.url).port}/hook`, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    const attempts = (await h.delivery(delivery.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }));
    expect({ status: delivery.status, attempts, received: r.received.length, lookups: resolve.calls.length }).toEqual({
      status: "failed",
      attempts: [
        { status: 503, error: null },
        { status: null, error: "refused: host inside.example.test resolves to a loopback address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists" },
      ],
      received: 1,
      lookups: 3,
    });
  });

  test("a name with one private address among public ones is refused at connect time", async () => {
    h = await scope.harness({ allowPrivateTargets: false, retrySchedule: [] }, { network: { resolve: answering(["93.184.216.34"], ["93.184.216.34", "10.1.2.3"]) } });
    await h.subscribe("http://mixed.example.test/hook", ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery.last_error).toBe("refused: host mixed.example.test resolves to a private address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists");
  });

  test("https: a certificate that does not name the original host is refused, though the address is the same", async () => {
    const { delivery, reached } = await deliverToMisnamedCertificate(["127.0.0.1"]);
    expect(delivery).toMatchObject({ status: "failed", last_response_status: null });
    expect(delivery.last_error).toBe("connection failed: the certificate does not name other.example.test (ERR_TLS_CERT_ALTNAME_INVALID)");
    expect(reached).toBe(0);
  });

  test("https: a receiver that accepts only HTTP/2 refuses the handshake, recorded in words that say so rather than Bun's advice to check the port", async () => {
    h = await scope.harness({ retrySchedule: [] }, { network: { resolve: answering(["127.0.0.1"]), ca: CERT } });
    const refusals: string[] = [];
    let reached = 0;
    const server = createSecureServer({ cert: CERT, key: KEY, allowHTTP1: false }, (_, response) => (reached++, response.end("ok")));
    server.on("tlsClientError", (error: NodeJS.ErrnoException) => refusals.push(error.code!));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      await h.subscribe(`https://hooks.example.test:${(server.address() as AddressInfo).port}/hook`, ["contact.created"]);
      await createContact();
      const [delivery] = await settledDeliveries(h);
      const attempts = (await h.delivery(delivery.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }));
      expect(attempts).toEqual([
        {
          status: null,
          error: "connection failed: the TLS handshake failed (EPROTO): the receiver refused it or does not speak TLS on this port; a receiver that accepts only HTTP/2 refuses it, as deliveries are sent over HTTP/1.1",
        },
      ]);
      // The service offered HTTP/1.1 alone, and the receiver found nothing it speaks.
      expect({ refusals, reached }).toEqual({ refusals: ["ERR_SSL_NO_APPLICATION_PROTOCOL"], reached: 0 });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test("names that come to resolve to IPv6 documentation, benchmarking, ORCHID or segment-routing addresses are refused at connect time", async () => {
    const later: Record<string, string> = {
      "doc.example.test": "3fff::1",
      "bench.example.test": "2001:2::1",
      "orchid.example.test": "2001:10::1",
      "orchid2.example.test": "2001:20::1",
      "srv6.example.test": "5f00::1",
    };
    const asked = new Set<string>();
    // Public for the check at creation, the special-purpose address from then on.
    const resolve: Resolver = async (hostname) => (asked.has(hostname) ? [later[hostname]!] : (asked.add(hostname), ["93.184.216.34"]));
    h = await scope.harness({ allowPrivateTargets: false, retrySchedule: [] }, { network: { resolve } });
    for (const name of Object.keys(later)) await h.subscribe(`http://${name}/hook`, ["contact.created"]);
    await createContact();
    const deliveries = await settledDeliveries(h);
    expect(deliveries.map((d) => [d.target_url, d.last_error]).sort()).toEqual([
      ["http://bench.example.test/hook", "refused: host bench.example.test resolves to a reserved (benchmarking) address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists"],
      ["http://doc.example.test/hook", "refused: host doc.example.test resolves to a documentation address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists"],
      ["http://orchid.example.test/hook", "refused: host orchid.example.test resolves to a reserved (ORCHID) address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists"],
      ["http://orchid2.example.test/hook", "refused: host orchid2.example.test resolves to a reserved (ORCHIDv2) address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists"],
      ["http://srv6.example.test/hook", "refused: host srv6.example.test resolves to a reserved (segment routing) address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists"],
    ]);
  });

  test("an attempt's recorded error is cut at 1,000 characters, whatever the target's name makes it", async () => {
    const host = `${"a".repeat(60)}.`.repeat(30) + "example.test";
    const notFound: Resolver = async () => Promise.reject(Object.assign(new Error("not found"), { code: "ENOTFOUND" }));
    h = await scope.harness({ retrySchedule: [] }, { network: { resolve: notFound } });
    await h.subscribe(`http://${host}/hook`, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    const error = `${`refused: host ${host} could not be resolved (ENOTFOUND)`.slice(0, 999)}…`;
    expect({ last_error: delivery.last_error, attempts: (await h.delivery(delivery.id)).attempt_history.map((a: any) => a.error) }).toEqual({ last_error: error, attempts: [error] });
  });

  test("a name that resolves to no address is refused in words", async () => {
    h = await scope.harness({ retrySchedule: [] }, { network: { resolve: answering([]) } });
    await h.subscribe("http://empty.example.test/hook", ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect(delivery.last_error).toBe("refused: host empty.example.test could not be resolved (no address)");
  });
});

describe("pinned connect: a name with several addresses", () => {
  // The receiver listens on 127.0.0.1 alone, so its port is closed on ::1, as for localhost on a
  // dual-stack machine. This machine refuses a link-local address with no interface named at once
  // (EINVAL), as it does EACCES and EPERM behind a firewall rejecting IPv6: nothing was sent.
  for (const [first, failure] of [
    ["::1", "refuses the connection"],
    ["fe80::1", "fails for a reason of this machine's (EINVAL)"],
  ] as const) {
    test(`a name whose first address ${failure} is delivered at the next one, in the same attempt`, async () => {
      h = await scope.harness({ retrySchedule: [] }, { network: { resolve: answering([first, "127.0.0.1"]) } });
      const r = scope.receiver();
      const port = new URL(r.url).port;
      await h.subscribe(`http://dual.example.test:${port}/hook`, ["contact.created"]);
      await createContact();
      await expectDeliveredAtOnce(r, port);
    });
  }

  test("a name whose first address drops the connection silently is delivered at the next one, started beside it, well within the timeout", async () => {
    // 127.0.0.2 stands for an unreachable IPv6 address of a receiver's AAAA record: it never answers the SYN.
    h = await scope.harness({ deliveryTimeoutMs: 5000, retrySchedule: [] }, { network: { resolve: answering(["127.0.0.2", "127.0.0.1"]) } });
    const r = scope.receiver();
    const port = new URL(r.url).port;
    const silent = await blackhole("127.0.0.2", Number(port));
    try {
      await h.subscribe(`http://dual.example.test:${port}/hook`, ["contact.created"]);
      await createContact();
      // Waiting on the worker, not the API: polling the API for seconds runs into the read rate limit.
      await waitFor(() => h.rt.deliveries.inFlightCount === 1, "the attempt to start");
      await waitFor(() => h.rt.deliveries.inFlightCount === 0, "the attempt to end", 30_000);
      // Waiting on the first address alone, the attempt timed out at 5 s without reaching the second.
      await expectDeliveredAtOnce(r, port);
    } finally {
      silent.close();
    }
  });

  test("when the first address drops the connection silently and the next refuses it, the attempt times out naming the refusal", async () => {
    h = await scope.harness({ deliveryTimeoutMs: 1000, retrySchedule: [] }, { network: { resolve: answering(["127.0.0.2", "127.0.0.1"]) } });
    const closed = startReceiver();
    const port = new URL(closed.url).port;
    await closed.stop();
    const silent = await blackhole("127.0.0.2", Number(port));
    try {
      await h.subscribe(`http://dual.example.test:${port}/hook`, ["contact.created"]);
      await createContact();
      const [delivery] = await settledDeliveries(h);
      const attempts = (await h.delivery(delivery.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }));
      const error = `timed out after 1000 ms without a complete response; before it, connection refused by 127.0.0.1:${port} (ECONNREFUSED)`;
      expect({ status: delivery.status, attempts }).toEqual({ status: "failed", attempts: [{ status: null, error }] });
    } finally {
      silent.close();
    }
  });

  test("when every address fails, those the kernel refused locally are named by their code beside the refusals' words", async () => {
    const { delivery, attempts, port } = await deliverToClosedPort(["fe80::1", "127.0.0.2", "fe80::2"]);
    const error = `connection failed: connection refused by 127.0.0.2:${port} (ECONNREFUSED); could not connect to [fe80::1]:${port} and [fe80::2]:${port} (EINVAL)`;
    expect({ status: delivery.status, last_error: delivery.last_error, attempts }).toEqual({ status: "failed", last_error: error, attempts: [{ status: null, error }] });
  });

  test("an address that takes the probe and refuses the request's own connection a moment later (a receiver restarting) leaves the next address to try, in the same attempt", async () => {
    h = await scope.harness({ retrySchedule: [] }, { network: { resolve: answering(["127.0.0.2", "127.0.0.1"]) } });
    const r = scope.receiver();
    const port = new URL(r.url).port;
    // It stops listening as it takes its first connection, the probe: fetch's connection is refused.
    const restarting = createTcpServer((socket) => (socket.destroy(), restarting.close()));
    await new Promise<void>((listening) => restarting.listen(Number(port), "127.0.0.2", listening));
    try {
      await h.subscribe(`http://dual.example.test:${port}/hook`, ["contact.created"]);
      await createContact();
      await expectDeliveredAtOnce(r, port);
    } finally {
      restarting.close();
    }
  });

  test("when no address of a name takes the connection, the attempt's error names every address tried, sorted", async () => {
    h = await scope.harness({ retrySchedule: [] }, { network: { resolve: answering(["127.0.0.2", "127.0.0.1"]) } });
    const closed = startReceiver();
    const port = new URL(closed.url).port;
    await closed.stop();
    await h.subscribe(`http://dual.example.test:${port}/hook`, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    const attempts = (await h.delivery(delivery.id)).attempt_history.map((a: any) => ({ status: a.response_status, error: a.error }));
    const error = `connection failed: connection refused by 127.0.0.1:${port} and 127.0.0.2:${port} (ECONNREFUSED)`;
    expect({ status: delivery.status, last_error: delivery.last_error, attempts }).toEqual({ status: "failed", last_error: error, attempts: [{ status: null, error }] });
  });

  test("the same failure at addresses a name gives in another order (round-robin DNS) is worded alike, one reason on the health page", async () => {
    let order = ["127.0.0.2", "127.0.0.1"];
    h = await scope.harness({ retrySchedule: [] }, { network: { resolve: async () => order } });
    const closed = startReceiver();
    const port = new URL(closed.url).port;
    await closed.stop();
    const subscription = await h.subscribe(`http://dual.example.test:${port}/hook`, ["contact.created"]);
    await createContact();
    await settledDeliveries(h);
    order = order.toReversed();
    await createContact();
    await waitFor(async () => (await settledDeliveries(h)).length === 2, "the second delivery to fail");
    expect({ reasons: (await recentFailures(h.rt.db, subscription.id, "test"))!.map((f) => [f.reason, f.deliveries]) }).toEqual({
      reasons: [[`connection failed: connection refused by 127.0.0.1:${port} and 127.0.0.2:${port} (ECONNREFUSED)`, 2]],
    });
  });

  test("an attempt tries at most MAX_ADDRESSES_PER_ATTEMPT of a name's addresses: its error names those and counts the rest", async () => {
    // A name's owner decides how many addresses it has: 3,000 would be 3,000 connections and a 50 KB error, repeated in every list.
    const many = Array.from({ length: 3000 }, (_, i) => `127.2.${i >> 8}.${i & 255}`);
    const { delivery, attempts, port } = await deliverToClosedPort(many);
    const tried = many.slice(0, MAX_ADDRESSES_PER_ATTEMPT).map((address) => `${address}:${port}`);
    const error = `connection failed: connection refused by ${tried.join(" and ")} (ECONNREFUSED), and ${3000 - MAX_ADDRESSES_PER_ATTEMPT} more addresses not tried`;
    expect({ status: delivery.status, last_error: delivery.last_error, attempts }).toEqual({ status: "failed", last_error: error, attempts: [{ status: null, error }] });
  });

  test("the addresses an attempt tries alternate between the families, starting with the name's first, so one family's failures cannot use up the tries", () => {
    const v6 = ["2001:db8::1", "2001:db8::2", "2001:db8::3", "2001:db8::4"];
    const v4 = ["192.0.2.1", "192.0.2.2"];
    expect({
      mixed: addressesToTry([...v6, ...v4]),
      v4First: addressesToTry([v4[0]!, ...v6, v4[1]!]),
      one: addressesToTry(v6),
      few: addressesToTry(["::1", "127.0.0.1"]),
    }).toEqual({
      mixed: ["2001:db8::1", "192.0.2.1", "2001:db8::2", "192.0.2.2"],
      v4First: ["192.0.2.1", "2001:db8::1", "192.0.2.2", "2001:db8::2"],
      one: v6.slice(0, MAX_ADDRESSES_PER_ATTEMPT),
      few: ["::1", "127.0.0.1"],
    });
  });

  test("a failure after connecting ends the attempt, its error naming the addresses that refused before it", async () => {
    const { delivery, reached, port } = await deliverToMisnamedCertificate(["127.0.0.2", "127.0.0.1"]);
    expect({ status: delivery.status, last_error: delivery.last_error, reached }).toEqual({
      status: "failed",
      last_error: `connection failed: the certificate does not name other.example.test (ERR_TLS_CERT_ALTNAME_INVALID); before it, connection refused by 127.0.0.2:${port} (ECONNREFUSED)`,
      reached: 0,
    });
  });

  test("an HTTP answer from the first address ends the attempt: the next address is not tried", async () => {
    h = await scope.harness({ retrySchedule: [] }, { network: { resolve: answering(["127.0.0.1", "127.0.0.2"]) } });
    const r = scope.receiver();
    r.respond(() => new Response("busy", { status: 503 }));
    const port = Number(new URL(r.url).port);
    let reachedSecond = 0;
    const second = Bun.serve({ hostname: "127.0.0.2", port, fetch: () => (reachedSecond++, new Response("ok")) });
    try {
      await h.subscribe(`http://dual.example.test:${port}/hook`, ["contact.created"]);
      await createContact();
      const [delivery] = await settledDeliveries(h);
      expect({ status: delivery.status, response: delivery.last_response_status, first: r.received.length, second: reachedSecond }).toEqual({ status: "failed", response: 503, first: 1, second: 0 });
    } finally {
      await second.stop(true);
    }
  });

  test("a public name whose second address is private is refused before any address is tried, though a receiver listens there", async () => {
    h = await scope.harness({ allowPrivateTargets: false, retrySchedule: [] }, { network: { resolve: answering(["93.184.216.34"], ["93.184.216.34", "127.0.0.1"]) } });
    const r = scope.receiver();
    await h.subscribe(`http://mixed.example.test:${new URL(r.url).port}/hook`, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    expect({ status: delivery.status, last_error: delivery.last_error, received: r.received.length }).toEqual({
      status: "failed",
      last_error: "refused: host mixed.example.test resolves to a loopback address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists",
      received: 0,
    });
  });
});

// A network namespace of its own needs root (the suite and CI run as root); otherwise skipped.
const canProhibitRoutes = process.getuid?.() === 0 && Bun.which("unshare") !== null && Bun.which("ip") !== null;

describe.skipIf(!canProhibitRoutes)("pinned connect: addresses a route prohibits (EACCES), in a network namespace of its own", () => {
  test("an address whose connect fails EACCES, as behind a firewall rejecting IPv6, moves the attempt on to the next; every address failing is named by its code", async () => {
    const routes = "ip link set lo up && ip route add prohibit 198.51.100.0/24 && ip -6 route add prohibit 2001:db8::/32";
    const cases = [
      ["2001:db8::7", "127.0.0.1"],
      ["198.51.100.7", "127.0.0.1"],
      ["2001:db8::7", "198.51.100.7"],
    ];
    const child = Bun.spawn(["unshare", "-n", "sh", "-c", `${routes} && exec "$0" "$1" "$2"`, process.execPath, join(import.meta.dir, "fixtures/prohibited-routes.ts"), JSON.stringify(cases)], { stdout: "pipe", stderr: "inherit" });
    const output = await new Response(child.stdout).text();
    expect(await child.exited).toBe(0);
    const { port, attempts } = JSON.parse(output);
    expect(attempts).toEqual([
      { addresses: cases[0], status: 200, error: null, received: 1 },
      { addresses: cases[1], status: 200, error: null, received: 1 },
      { addresses: cases[2], status: null, error: `connection failed: could not connect to 198.51.100.7:${port} and [2001:db8::7]:${port} (EACCES)`, received: 0 },
    ]);
  });
});

describe("pinned connect: a name server that does not answer", () => {
  test("the delivery timeout covers the lookup: the attempt ends at it, in words, and is not claimed again while the lookup runs on", async () => {
    const calls: string[] = [];
    // The subscriber's own name server, taking 3 s (a silent one takes the system 10-30 s).
    const resolve = async (hostname: string) => {
      calls.push(hostname);
      await Bun.sleep(3000);
      return ["127.0.0.1"];
    };
    h = await scope.harness({ deliveryTimeoutMs: 300, retrySchedule: [] }, { network: { resolve } });
    const r = scope.receiver();
    await h.subscribe(`http://slow.example.test:${new URL(r.url).port}/hook`, ["contact.created"]);
    await createContact();
    const [delivery] = await settledDeliveries(h);
    const [attempt] = (await h.delivery(delivery.id)).attempt_history;
    expect({ status: delivery.status, error: attempt.error, quick: attempt.duration_ms < 1000 }).toEqual({ status: "failed", error: "timed out after 300 ms without a complete response", quick: true });
    // Past the lease the first attempt would have held (300 ms + 2 s) had it waited for the lookup.
    await Bun.sleep(2500);
    expect({ lookups: calls.length, sent: r.received.length, inFlight: h.rt.deliveries.inFlightCount }).toEqual({ lookups: 1, sent: 0, inFlight: 0 });
  });
});

describe("pinned connect: the system resolver and a name server that does not answer", () => {
  // More than the few lookups Bun's getaddrinfo threads run at once. Each test has names of its own:
  // the resolver's cache is the process's, and a lookup left waiting by one test is reused by the next.
  const silentNames = (test: string) => [1, 2, 3, 4, 5, 6].map((i) => `silent-${i}.${test}.example.test`);

  test("while lookups of several targets wait on a silent name server, another target's delivery is attempted and succeeds", async () => {
    const SILENT_NAMES = silentNames("deliveries");
    const silent = await silentNameServer();
    try {
      h = await scope.harness({ deliveryTimeoutMs: 60_000, retrySchedule: [] });
      for (const name of SILENT_NAMES) await h.subscribe(`http://${name}/hook`, ["contact.created"]);
      await createContact();
      await waitFor(() => SILENT_NAMES.every((name) => silent.asked.has(name)), "the silent name server to be asked every silent name");
      // localhost comes from /etc/hosts, as the names operators add there do.
      const r = scope.receiver();
      await h.subscribe(`http://localhost:${new URL(r.url).port}/hook`, ["account.created"]);
      expect((await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).status).toBe(201);
      // Waiting on the receiver, not the API: polling the API for long runs into the read rate limit.
      await waitFor(() => r.received.length > 0, "the healthy receiver to get its delivery");
      const [healthy] = await settledDeliveries(h, "event=account.created");
      const silentDeliveries = await h.deliveries("event=contact.created");
      expect({
        healthy: { status: healthy.status, attempts: healthy.attempts, response: healthy.last_response_status, received: r.received.length },
        silent: silentDeliveries.map((d) => d.status),
        inFlight: h.rt.deliveries.inFlightCount,
      }).toEqual({
        healthy: { status: "succeeded", attempts: 1, response: 200, received: 1 },
        silent: SILENT_NAMES.map(() => "pending"),
        inFlight: SILENT_NAMES.length,
      });
    } finally {
      silent.close();
      silent.restore();
    }
  });

  test("while creates for names whose name server is silent wait, a create for a name that resolves is answered", async () => {
    const SILENT_NAMES = silentNames("creates");
    const silent = await silentNameServer();
    try {
      h = await scope.harness({ allowPrivateTargets: false, deliveryTimeoutMs: 60_000 });
      const create = (targetUrl: string) => h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: targetUrl, events: ["contact.created"] } });
      let answered = 0;
      const waiting = SILENT_NAMES.map((name) => create(`http://${name}/hook`).finally(() => answered++));
      await waitFor(() => SILENT_NAMES.every((name) => silent.asked.has(name)), "the silent name server to be asked every silent name");
      const resolved = await create("http://localhost/hook");
      expect({ status: resolved.status, detail: resolved.body.errors[0].detail, silentAnswered: answered }).toEqual({
        status: 422,
        detail: expect.stringMatching(/^host localhost resolves to a loopback address; webhook targets must be public/),
        silentAnswered: 0,
      });
      silent.close();
      expect((await Promise.all(waiting)).map((res) => [res.status, res.body.errors[0].detail])).toEqual(
        SILENT_NAMES.map((name) => [422, `host ${name} could not be resolved (ECONNREFUSED)`]),
      );
    } finally {
      silent.close();
      silent.restore();
    }
  });
});

describe("pinned connect: the check at creation and a name server that does not answer", () => {
  test("a create for a name whose name server is silent is refused at the delivery timeout, in words", async () => {
    const silent = await silentNameServer();
    try {
      h = await scope.harness({ allowPrivateTargets: false, deliveryTimeoutMs: 300 });
      const res = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://silent.bounded.example.test/hook", events: ["contact.created"] } });
      expect({ status: res.status, body: res.body, asked: silent.asked.has("silent.bounded.example.test") }).toEqual({
        status: 422,
        body: validation([{ pointer: "/target_url", detail: "host silent.bounded.example.test could not be resolved (no answer within 300 ms)" }], "The target URL is not allowed."),
        asked: true,
      });
    } finally {
      silent.close();
      silent.restore();
    }
  });
});

describe("pinned connect: the system resolver's hosts file", () => {
  test("every line that lists a name counts, in file order: a public line then a private one is refused, as getaddrinfo reads them", async () => {
    const dir = mkdtempSync(join(tmpdir(), "crm-hosts-"));
    try {
      const hostsFile = join(dir, "hosts");
      writeFileSync(
        hostsFile,
        ["# a comment naming mixed.example.test", "93.184.216.34 public.example.test Mixed.Example.Test # public first", "127.0.0.1 localhost", "10.1.2.3\tmixed.example.test", "::1 localhost", "127.0.0.1 localhost.localdomain localhost", ""].join("\n"),
      );
      const resolve: Resolver = (hostname) => systemLookup(hostname, hostsFile);
      expect(await resolve("mixed.example.test")).toEqual(["93.184.216.34", "10.1.2.3"]);
      expect(await resolveTarget("public.example.test", resolve, false)).toEqual(["93.184.216.34"]);
      // Each address is tried once, however many lines list it.
      expect(await resolveTarget("localhost", resolve, true)).toEqual(["127.0.0.1", "::1"]);
      await expect(resolveTarget("mixed.example.test", resolve, false)).rejects.toThrow(
        "host mixed.example.test resolves to a private address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists",
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("pinned connect: the system resolver's cache", () => {
  test("a name's answer is reused for the cache time, then asked again; a failed lookup is not kept", async () => {
    let clock = 0;
    let calls = 0;
    const resolve = cachedResolver(
      async (hostname) => {
        calls++;
        if (hostname === "down.example.test" && calls < 4) throw Object.assign(new Error("not found"), { code: "ENOTFOUND" });
        return [`192.0.2.${calls}`];
      },
      30_000,
      () => clock,
    );
    expect(await resolve("hooks.example.test")).toEqual(["192.0.2.1"]);
    clock = 29_999;
    expect(await resolve("hooks.example.test")).toEqual(["192.0.2.1"]);
    clock = 30_000;
    expect(await resolve("hooks.example.test")).toEqual(["192.0.2.2"]);
    await expect(resolve("down.example.test")).rejects.toThrow("not found");
    await Bun.sleep(0);
    expect(await resolve("down.example.test")).toEqual(["192.0.2.4"]);
    expect(calls).toBe(4);
  });
});
