import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG, type Config } from "../../server/config.ts";
import { BUN_MAX_HEADER_BYTES, MAX_FORM_BYTES } from "../../server/limits/limits.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { parseExposition } from "../ops/prometheus.ts";
import { waitFor } from "../webhooks/support.ts";
import { closedWithin, Connection, type RawResponse } from "./support.ts";

let running: RunningServer | undefined;
let dataDir: string | undefined;
afterEach(async () => {
  await running?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  running = undefined;
  dataDir = undefined;
});

async function serve(overrides: Partial<Config>, log = createLogger("error", () => {})): Promise<{ port: number; token: string }> {
  dataDir = mkdtempSync(join(tmpdir(), "crm-limits-"));
  const config: Config = { ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error", ...overrides };
  running = await startServer(config, log);
  return { port: running.server.port!, token: (await createApiToken(running.runtime.db, "connections")).token };
}

/** HELD_BODY is the body holdRequest declares and leaves unsent. */
const HELD_BODY = `{"first_name":"Ada"}`;

/** holdRequest sends a POST head whose body is not sent yet (write HELD_BODY to finish it): a request in flight until then. */
function holdRequest(connection: Connection, headers: Record<string, string>): void {
  const lines = Object.entries({ host: "127.0.0.1", ...headers, "content-type": "application/json", "content-length": String(HELD_BODY.length) }).map(([k, v]) => `${k}: ${v}\r\n`);
  connection.write(`POST /public/v1/contacts HTTP/1.1\r\n${lines.join("")}\r\n`);
}

describe("connections: within the limits", () => {
  test("connections up to --max-connections are served, and keep-alive reuses one", async () => {
    const { port } = await serve({ maxConnections: 2 });
    const a = new Connection(port);
    const b = new Connection(port);
    for (let i = 0; i < 3; i++) expect((await a.request("GET", "/healthz")).status).toBe(200);
    expect((await b.request("GET", "/healthz")).status).toBe(200);
    a.destroy();
    b.destroy();
  });
});

describe("connections: what the operator is told of refusals", () => {
  // s33 observability audit: a refusal for a limit was an info request line without its problem
  // type, nothing at --log-level warn, and counted as route="unmatched", which no route serves.
  test("refusals for the connection cap are logged at warn once a minute naming the limit, each request line names the problem, and they are counted under the route they were sent to", async () => {
    const lines: Record<string, any>[] = [];
    const { port, token } = await serve({ maxConnections: 2, maxConnectionsPerClient: 2 }, createLogger("info", (line) => lines.push(JSON.parse(line))));
    const auth = { authorization: `Bearer ${token}` };
    const held = [new Connection(port), new Connection(port)];
    for (const c of held) expect((await c.request("GET", "/healthz")).status).toBe(200);
    const refused: number[] = [];
    for (let i = 0; i < 2; i++) {
      const extra = new Connection(port);
      refused.push((await extra.request("GET", "/public/v1/contacts", auth)).status);
      await extra.closed;
    }
    expect(refused).toEqual([503, 503]);
    for (const c of held) c.destroy();
    const requestLines = () => lines.filter((l) => l.msg === "request" && l.status === 503);
    await waitFor(() => requestLines().length === 2, "both refusals' request lines");
    expect({
      warn: lines.filter((l) => l.level === "warn").map(({ msg, problem, method, path, detail }) => ({ msg, problem, method, path, detail })),
      requests: requestLines().map(({ level, path, problem }) => ({ level, path, problem })),
      counted: parseExposition(running!.runtime.metrics.render([])).samples.filter((s) => s.name === "crm_http_requests_total" && s.labels.status === "503"),
    }).toEqual({
      warn: [
        {
          msg: "a limit of the service refused a request (503): it is at capacity",
          problem: "too-many-connections",
          method: "GET",
          path: "/public/v1/contacts",
          detail: "The server is serving its limit of 2 connections. Retry shortly, or reuse a kept-alive connection.",
        },
      ],
      requests: Array(2).fill({ level: "info", path: "/public/v1/contacts", problem: "too-many-connections" }),
      counted: [{ name: "crm_http_requests_total", labels: { method: "GET", route: "/public/v1/contacts", status: "503" }, value: 2 }],
    });
  });
});

describe("connections: closed connections and each client's share", () => {
  test("a connection stops counting the moment its client closes it: a burst of short connections leaves the API available", async () => {
    const { port, token } = await serve({ maxConnections: 16, maxConnectionsPerClient: 16 });
    const statuses: number[] = [];
    for (let i = 0; i < 100; i++) {
      const short = new Connection(port);
      statuses.push((await short.request("GET", "/public/v1/contacts", { authorization: `Bearer ${token}` })).status);
      short.destroy();
      await short.closed;
    }
    const legitimate = new Connection(port);
    statuses.push((await legitimate.request("GET", "/public/v1/contacts", { authorization: `Bearer ${token}` })).status);
    legitimate.destroy();
    expect(statuses).toEqual(Array(101).fill(200));
  });

  test("one client address holds at most its share (an eighth of the cap by default); past it that client is refused, not the others", async () => {
    const { port, token } = await serve({ maxConnections: 16 });
    const auth = { authorization: `Bearer ${token}` };
    const greedy = [new Connection(port, "127.0.0.2"), new Connection(port, "127.0.0.2")];
    for (const c of greedy) expect((await c.request("GET", "/public/v1/contacts", auth)).status).toBe(200);
    const third = new Connection(port, "127.0.0.2");
    const refused = await third.request("GET", "/public/v1/contacts", auth);
    expect([refused.status, refused.headers["retry-after"], JSON.parse(refused.body)]).toEqual([
      503,
      "1",
      {
        type: "urn:crm:problem:too-many-connections",
        title: "Service Unavailable",
        status: 503,
        detail: "This client address holds its limit of 2 connections (of 16 in all). Retry shortly, or reuse a kept-alive connection.",
      },
    ]);
    expect(await closedWithin(third, 5000)).toBe(true);
    const other = new Connection(port, "127.0.0.3");
    expect((await other.request("GET", "/public/v1/contacts", auth)).status).toBe(200);
    // the greedy client closes one: its next connection is served at once
    greedy[0]!.destroy();
    await greedy[0]!.closed;
    const again = new Connection(port, "127.0.0.2");
    expect((await again.request("GET", "/public/v1/contacts", auth)).status).toBe(200);
    for (const c of [greedy[1]!, other, again]) c.destroy();
  });

  test("behind a trusted proxy each forwarded client's share is its requests in flight, whichever pooled connection carries them: a client with none is served, the proxy's connection is kept", async () => {
    const { port, token } = await serve({ maxConnections: 16, maxConnectionsPerClient: 2, trustedProxies: ["127.0.0.1"], bodyTimeoutMs: 60_000 });
    const as = (client: string) => ({ authorization: `Bearer ${token}`, "x-forwarded-for": client });
    const [a, b] = ["198.51.100.7", "203.0.113.9"];
    // the proxy's keep-alive pool (deploy/nginx-instances.conf): opened for A, then reused for B
    const pool = [new Connection(port), new Connection(port)];
    const statuses: number[] = [];
    for (const c of pool) statuses.push((await c.request("GET", "/public/v1/contacts", as(a))).status);
    for (let i = 0; i < 3; i++) for (const c of pool) statuses.push((await c.request("GET", "/public/v1/contacts", as(b))).status);
    const forA = new Connection(port);
    statuses.push((await forA.request("GET", "/public/v1/contacts", as(a))).status);
    expect(statuses).toEqual(Array(9).fill(200));
    // B holds two requests in flight (their bodies not sent yet): its third is refused, A's are not
    for (const c of pool) holdRequest(c, as(b));
    expect((await forA.request("GET", "/public/v1/contacts", as(a))).status).toBe(200);
    const forB = new Connection(port);
    const refused = await forB.request("GET", "/public/v1/contacts", as(b));
    expect([refused.status, refused.headers["retry-after"], refused.headers.connection, JSON.parse(refused.body)]).toEqual([
      503,
      "1",
      undefined,
      {
        type: "urn:crm:problem:too-many-connections",
        title: "Service Unavailable",
        status: 503,
        detail: "This client address has its limit of 2 requests in flight through the proxy. Retry shortly.",
      },
    ]);
    // once B's requests are answered, the same connection serves B again
    for (const c of pool) {
      c.write(HELD_BODY);
      expect((await c.response()).status).toBe(201);
    }
    expect((await forB.request("GET", "/public/v1/contacts", as(b))).status).toBe(200);
    for (const c of [...pool, forA, forB]) c.destroy();
  });

  test("behind a trusted proxy the proxy's connections count toward --max-connections only", async () => {
    const { port, token } = await serve({ maxConnections: 3, maxConnectionsPerClient: 1, trustedProxies: ["127.0.0.1"] });
    const as = (client: string) => ({ authorization: `Bearer ${token}`, "x-forwarded-for": client });
    const pool = [new Connection(port), new Connection(port), new Connection(port)];
    const statuses: number[] = [];
    for (const c of pool) statuses.push((await c.request("GET", "/public/v1/contacts", as("198.51.100.7"))).status);
    const fourth = new Connection(port);
    const refused = await fourth.request("GET", "/public/v1/contacts", as("203.0.113.9"));
    statuses.push(refused.status);
    expect([statuses, JSON.parse(refused.body).detail]).toEqual([
      [200, 200, 200, 503],
      "The server is serving its limit of 3 connections. Retry shortly, or reuse a kept-alive connection.",
    ]);
    for (const c of [...pool, fourth]) c.destroy();
  });

  test("an IPv6 client's share is its /64: other addresses of that network, however spelled, hold the same share", async () => {
    const { port, token } = await serve({ maxConnections: 16, maxConnectionsPerClient: 2, trustedProxies: ["127.0.0.1"], bodyTimeoutMs: 60_000 });
    const as = (client: string) => ({ authorization: `Bearer ${token}`, "x-forwarded-for": client });
    const held = [new Connection(port), new Connection(port)];
    holdRequest(held[0]!, as("2001:db8:1:2::a"));
    holdRequest(held[1]!, as("2001:DB8:1:2:0:0:0:B"));
    const nextNetwork = new Connection(port);
    expect((await nextNetwork.request("GET", "/public/v1/contacts", as("2001:db8:1:3::a"))).status).toBe(200);
    const third = new Connection(port);
    expect((await third.request("GET", "/public/v1/contacts", as("2001:0db8:0001:0002:ffff:1:2:3"))).status).toBe(503);
    for (const c of [...held, third, nextNetwork]) c.destroy();
  });

  test("/healthz and /readyz (with a trailing / too) still answer when the cap is reached; the API does not", async () => {
    const { port, token } = await serve({ maxConnections: 2, maxConnectionsPerClient: 2 });
    const auth = { authorization: `Bearer ${token}` };
    const held = [new Connection(port), new Connection(port)];
    for (const c of held) expect((await c.request("GET", "/public/v1/contacts", auth)).status).toBe(200);
    const probe = new Connection(port);
    expect([(await probe.request("GET", "/healthz")).status, (await probe.request("GET", "/readyz")).status]).toEqual([200, 200]);
    expect([(await probe.request("GET", "/healthz/")).status, (await probe.request("GET", "/readyz/")).status]).toEqual([200, 200]);
    expect((await new Connection(port).request("GET", "/public/v1/contacts", auth)).status).toBe(503);
    for (const c of [...held, probe]) c.destroy();
  });
});

describe("connections: request bodies in memory", () => {
  test("a chunked body is charged as it is read: past --body-buffer-max-mb it gets 503, and once the budget is free it is served", async () => {
    const { port, token } = await serve({ bodyBufferMaxMb: 1, bodyTimeoutMs: 60_000 });
    const head = (framing: string) => `POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\n${framing}\r\n\r\n`;
    const holder = new Connection(port);
    holder.write(head(`content-length: ${1024 * 1024}`)); // takes the whole budget; its body never comes
    const chunk = `{"first_name":"Ada"}`;
    const chunked = `${head("transfer-encoding: chunked")}${chunk.length.toString(16)}\r\n${chunk}\r\n0\r\n\r\n`;
    const probe = new Connection(port);
    await probe.request("GET", "/healthz"); // answered after the holder's head, sent first, was taken in
    probe.destroy();
    const late = new Connection(port);
    late.write(chunked);
    const refused = await late.response();
    expect([refused.status, JSON.parse(refused.body).type]).toEqual([503, "urn:crm:problem:body-buffer-full"]);
    holder.destroy();
    await holder.closed;
    // the holder's answer (the connection ended before its body) gives its share back
    let served: RawResponse | undefined;
    for (let i = 0; i < 100 && served?.status !== 201; i++) {
      const c = new Connection(port);
      c.write(chunked);
      served = await c.response();
      c.destroy();
      if (served.status !== 201) await Bun.sleep(20);
    }
    expect(served!.status).toBe(201);
  });
});

describe("connections: a header field sent many times", () => {
  test("each line of a repeated field counts toward the 100 fields and the 8 KiB, though Bun joins them into one value", async () => {
    const { port } = await serve({});
    const send = async (lines: string) => {
      const c = new Connection(port);
      c.write(`GET /healthz HTTP/1.1\r\nhost: x\r\n${lines}\r\n`);
      const answer = await c.response();
      c.destroy();
      return [answer.status, answer.status === 431 ? JSON.parse(answer.body).detail : ""];
    };
    const repeated = (name: string, n: number) => `${name}: 1\r\n`.repeat(n);
    expect(await send(repeated("x-a", 98))).toEqual([200, ""]);
    // 150 lines of one name: before, they counted as one field and 200 came back.
    expect(await send(repeated("x-a", 150))).toEqual([431, "The request has 151 header fields; the limit is 100."]);
    // 90 lines of a 100-character name are about 9.2 KiB of headers, under the fields' limit.
    const [status, detail] = await send(repeated(`x-${"n".repeat(98)}`, 90));
    expect([status, detail]).toEqual([431, expect.stringMatching(/^The request headers are 9\d{3} bytes; the limit is 8192 bytes \(8 KiB\)\./)]);
  });
});

describe("connections: the console's forms in the body budget", () => {
  test("console forms hold at most 64 KiB of the budget each: sign-in forms declaring 1 MiB with no credential are refused 413 at once, and the API's writes go on", async () => {
    const { port, token } = await serve({ bodyBufferMaxMb: 1, bodyTimeoutMs: 60_000 });
    const form = (length: number) => `POST /console/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: ${length}\r\n\r\n`;
    // Their bodies never come: before, each held 1 MiB until its 408 (10 s and more), and one filled the budget.
    const declaredLarge = [1, 2, 3, 4].map(() => new Connection(port));
    for (const c of declaredLarge) c.write(form(1024 * 1024));
    const refusals = await Promise.all(declaredLarge.map((c) => c.response()));
    expect(refusals.map((r) => [r.status, /<h1>([^<]*)<\/h1>/.exec(r.body)?.[1]])).toEqual(Array(4).fill([413, "Form too large"]));
    const declaredSmall = [1, 2, 3, 4].map(() => new Connection(port));
    for (const c of declaredSmall) c.write(form(MAX_FORM_BYTES));
    const probe = new Connection(port);
    await probe.request("GET", "/healthz"); // answered after the forms' heads, sent first, were taken in
    const write = await probe.request("POST", "/public/v1/contacts", { authorization: `Bearer ${token}`, "content-type": "application/json" }, JSON.stringify({ first_name: "Ada" }));
    expect(write.status).toBe(201);
    for (const c of [...declaredLarge, ...declaredSmall, probe]) c.destroy();
  });
});

describe("connections: over the limits", () => {
  test("a connection beyond --max-connections gets 503 problem+json and is closed; one that said Connection: close frees its place", async () => {
    const { port, token } = await serve({ maxConnections: 2, maxConnectionsPerClient: 2 });
    const a = new Connection(port);
    const b = new Connection(port);
    expect((await a.request("GET", "/healthz")).status).toBe(200);
    expect((await b.request("GET", "/healthz")).status).toBe(200);
    const c = new Connection(port);
    const refused = await c.request("GET", "/public/v1/contacts", { authorization: `Bearer ${token}` });
    expect(refused.status).toBe(503);
    expect(refused.headers["content-type"]).toBe("application/problem+json");
    expect(refused.headers["retry-after"]).toBe("1");
    expect(JSON.parse(refused.body)).toEqual({
      type: "urn:crm:problem:too-many-connections",
      title: "Service Unavailable",
      status: 503,
      detail: "The server is serving its limit of 2 connections. Retry shortly, or reuse a kept-alive connection.",
    });
    expect(await closedWithin(c, 5000)).toBe(true);
    expect((await a.request("GET", "/healthz", { connection: "close" })).status).toBe(200);
    expect(await closedWithin(a, 5000)).toBe(true);
    const d = new Connection(port);
    expect((await d.request("GET", "/healthz")).status).toBe(200);
    b.destroy();
    d.destroy();
  });

  test("a request refused before routing (414) still frees its connection's place", async () => {
    const { port } = await serve({ maxConnections: 1 });
    const a = new Connection(port);
    expect((await a.request("GET", `/healthz?${"q".repeat(5000)}`, { connection: "close" })).status).toBe(414);
    await a.closed;
    const b = new Connection(port);
    expect((await b.request("GET", "/healthz")).status).toBe(200);
    b.destroy();
  });

  test("a body slower than --body-timeout-ms gets 408 problem+json, even past the idle timeout, and nothing is stored", async () => {
    // Past Bun's own idle close (1 s, checked every 4 s): the guard extends the timer for the body.
    const { port, token } = await serve({ idleTimeoutSeconds: 1, bodyTimeoutMs: 4500 });
    const slow = new Connection(port);
    slow.write(`POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"first_name":`);
    const res = await slow.response();
    expect(res.status).toBe(408);
    expect(res.headers["content-type"]).toBe("application/problem+json");
    expect(JSON.parse(res.body)).toEqual({ type: "urn:crm:problem:body-timeout", title: "Request Timeout", status: 408, detail: "The request body did not arrive within 4500 ms." });
    expect(await closedWithin(slow, 5000)).toBe(true);
    expect(await running!.runtime.db.get("SELECT count(*) AS n FROM contacts")).toEqual({ n: 0 });
  });

  test("a stalled body gets its 408 even when the idle timeout is as long, though Bun's idle timer fires up to a 4 s tick early", async () => {
    // The idle timer is checked every 4 s: set for 2 s, it fires at the next check, 0 to 4 s later.
    // Stalls started half a second apart cover that period, so some would close first without the fix.
    const { port, token } = await serve({ idleTimeoutSeconds: 2, bodyTimeoutMs: 2000, maxConnectionsPerClient: 16 });
    const answers = await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        await Bun.sleep(i * 500);
        const stalled = new Connection(port);
        stalled.write(`POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: 29\r\n\r\n{"first_name":"Ada"}`);
        return await stalled.response().then((res) => res.status, () => "closed without an answer");
      }),
    );
    expect(answers).toEqual(Array(8).fill(408));
    expect(await running!.runtime.db.get("SELECT count(*) AS n FROM contacts")).toEqual({ n: 0 });
  }, 15_000);

  test(
    "an idle keep-alive connection is closed after --idle-timeout-seconds, and one that never finishes its request head by Bun's 10 s",
    async () => {
      const { port } = await serve({ idleTimeoutSeconds: 1 });
      const idle = new Connection(port);
      expect((await idle.request("GET", "/healthz")).status).toBe(200);
      const slowloris = new Connection(port);
      slowloris.write("GET /healthz HTTP/1.1\r\nhost: x\r\n");
      const drip = setInterval(() => slowloris.isClosed || slowloris.write("x-drip: 1\r\n"), 1000);
      try {
        const [idleClosed, headClosed] = await Promise.all([closedWithin(idle, 10_000), closedWithin(slowloris, 20_000)]);
        expect({ idleClosed, headClosed, slowlorisGot: slowloris.received }).toEqual({ idleClosed: true, headClosed: true, slowlorisGot: "" });
      } finally {
        clearInterval(drip);
      }
    },
    30_000,
  );

  test("request heads: our 431 problem+json above 8 KiB, Bun's own bare 431 above 16 KiB", async () => {
    const { port } = await serve({});
    const ours = await new Connection(port).request("GET", "/healthz", { "x-big": "b".repeat(10 * 1024) });
    expect([ours.status, ours.headers["content-type"], JSON.parse(ours.body).type]).toEqual([431, "application/problem+json", "urn:crm:problem:headers-too-large"]);
    const huge = new Connection(port);
    huge.write(`GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ${"b".repeat(BUN_MAX_HEADER_BYTES)}\r\n\r\n`);
    await huge.closed;
    expect(huge.received).toStartWith("HTTP/1.1 431 ");
  });

  test("failed authentication is throttled by the client's address through a real server", async () => {
    const { port, token } = await serve({ authFailuresPerMinute: 2 });
    const url = `http://127.0.0.1:${port}/public/v1/contacts`;
    expect((await fetch(url)).status).toBe(401);
    expect((await fetch(url, { headers: { authorization: "Bearer crm_wrong" } })).status).toBe(401);
    const refused = await fetch(url);
    expect([refused.status, refused.headers.get("retry-after"), refused.headers.get("ratelimit")]).toEqual([429, "30", '"failed-auth";r=0;t=60']);
    expect((await fetch(url, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
  });
  test("failed authentication from IPv6 counts per /64: a client cannot take a fresh allowance from each address of its network", async () => {
    const { port } = await serve({ authFailuresPerMinute: 2, trustedProxies: ["127.0.0.1"] });
    const from = (client: string) => fetch(`http://127.0.0.1:${port}/public/v1/contacts`, { headers: { "x-forwarded-for": client } });
    expect([(await from("2001:db8:5:6::1")).status, (await from("2001:db8:5:6::2")).status]).toEqual([401, 401]);
    const refused = await from("2001:db8:5:6:abcd::3");
    expect([refused.status, refused.headers.get("ratelimit")]).toEqual([429, '"failed-auth";r=0;t=60']);
    expect([(await from("2001:db8:5:7::1")).status, (await from("203.0.113.7")).status]).toEqual([401, 401]);
  });

  test("failed authentication relayed by a trusted proxy that names the client only in X-Real-IP or Forwarded counts for one unknown client, not for the proxy's own address", async () => {
    const { port } = await serve({ authFailuresPerMinute: 2, trustedProxies: ["127.0.0.1"] });
    const send = (headers: Record<string, string>) => fetch(`http://127.0.0.1:${port}/public/v1/contacts`, { headers });
    const relayed: Record<string, string>[] = [{ "x-real-ip": "203.0.113.7" }, { forwarded: "for=198.51.100.2" }, { "x-real-ip": "192.0.2.3" }];
    const statuses = [];
    for (const headers of relayed) statuses.push((await send(headers)).status);
    statuses.push((await send({})).status); // a client on the proxy's machine, not relayed
    expect(statuses).toEqual([401, 401, 429, 401]);
  });
});
