import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken, tokenRate } from "../../server/auth/service.ts";
import { databasePath, openDatabase } from "../../server/db/database.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { makeRoom, MAX_TRACKED_KEYS, parseTokenRate, TokenBuckets } from "../../server/limits/rate-limiter.ts";
import { startServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { contactCount } from "../foundation/support.ts";
import { waitFor } from "../webhooks/support.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { sqliteOnly } from "../support/backend.ts";
import { parseExposition } from "../ops/prometheus.ts";

let h: Harness | undefined;
afterEach(() => {
  h?.close();
  h = undefined;
});

const ROOT = join(import.meta.dir, "..", "..");
const rateHeaders = (res: { headers: Headers }) => ({ policy: res.headers.get("ratelimit-policy"), limit: res.headers.get("ratelimit"), retryAfter: res.headers.get("retry-after") });

describe("rate limits: within the limit", () => {
  test("every /public/v1 response carries RateLimit-Policy and RateLimit for the bucket it was counted in", async () => {
    h = await createHarness({ rateReadPerSecond: 1, rateReadBurst: 10, rateWritePerSecond: 1, rateWriteBurst: 5 });
    const list = await h.json("GET", "/public/v1/contacts");
    expect(list.status).toBe(200);
    expect(rateHeaders(list)).toEqual({ policy: '"read";q=10;w=10', limit: '"read";r=9;t=1', retryAfter: null });
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } });
    expect(created.status).toBe(201);
    expect(rateHeaders(created)).toEqual({ policy: '"write";q=5;w=5', limit: '"write";r=4;t=1', retryAfter: null });
    // Errors are counted and carry the fields too: validation, bad JSON, unknown route, 401.
    const invalid = await h.json("POST", "/public/v1/contacts", { body: { email: "not an email" } });
    expect([invalid.status, rateHeaders(invalid).limit]).toEqual([422, '"write";r=3;t=2']);
    const malformed = await h.json("POST", "/public/v1/contacts", { body: "{" });
    expect([malformed.status, rateHeaders(malformed).limit]).toEqual([400, '"write";r=2;t=3']);
    const missing = await h.json("GET", "/public/v1/nothing-here");
    expect([missing.status, rateHeaders(missing).limit]).toEqual([404, '"read";r=8;t=2']);
    const anonymous = await h.json("GET", "/public/v1/contacts", { headers: { authorization: "" } });
    expect([anonymous.status, rateHeaders(anonymous)]).toEqual([401, { policy: '"failed-auth";q=20;w=60', limit: '"failed-auth";r=19;t=3', retryAfter: null }]);
  });

  test("POST, PATCH and DELETE are the writes: a method the API routes nowhere (PUT, OPTIONS) is counted as a read, its 405 too", async () => {
    h = await createHarness({ rateReadPerSecond: 1, rateReadBurst: 10, rateWritePerSecond: 1, rateWriteBurst: 5 });
    const counted = async (method: string, path: string) => {
      const res = await h!.json(method, path);
      return [method, path, res.status, res.headers.get("allow"), rateHeaders(res).limit];
    };
    expect([
      await counted("PUT", "/public/v1/contacts"),
      await counted("OPTIONS", "/public/v1/contacts"),
      await counted("DELETE", "/public/v1/contacts"),
      await counted("PATCH", "/public/v1/contacts"),
    ]).toEqual([
      ["PUT", "/public/v1/contacts", 405, "POST, GET, HEAD", '"read";r=9;t=1'],
      ["OPTIONS", "/public/v1/contacts", 405, "POST, GET, HEAD", '"read";r=8;t=2'],
      // DELETE and PATCH are writes wherever they go: counted before routing, by the method.
      ["DELETE", "/public/v1/contacts", 405, "POST, GET, HEAD", '"write";r=4;t=1'],
      ["PATCH", "/public/v1/contacts", 405, "POST, GET, HEAD", '"write";r=3;t=2'],
    ]);
  });

  test("routes outside /public/v1 carry no rate limit fields", async () => {
    h = await createHarness();
    const res = await h.request("GET", "/healthz");
    expect(res.status).toBe(200);
    expect(rateHeaders(res)).toEqual({ policy: null, limit: null, retryAfter: null });
  });

  test("reads and writes have separate buckets, and each token its own", async () => {
    h = await createHarness({ rateReadPerSecond: 1, rateReadBurst: 2, rateWritePerSecond: 1, rateWriteBurst: 2 });
    for (let i = 0; i < 2; i++) expect((await h.request("GET", "/public/v1/contacts")).status).toBe(200);
    expect((await h.request("GET", "/public/v1/contacts")).status).toBe(429);
    expect((await h.request("POST", "/public/v1/contacts", { body: { first_name: "R" } })).status).toBe(201);
    const other = (await createApiToken(h.rt.db, "other")).token;
    expect((await h.request("GET", "/public/v1/contacts", { headers: { authorization: `Bearer ${other}` } })).status).toBe(200);
  });

  test("a token created with its own rate gets that rate instead of the defaults", async () => {
    h = await createHarness({ rateReadPerSecond: 1, rateReadBurst: 1 });
    const rate = parseTokenRate("50:300,2:3")!;
    const own = (await createApiToken(h.rt.db, "bulk reader", Date.now(), rate)).token;
    expect(await tokenRate(h.rt.db, (await createApiToken(h.rt.db, "plain")).info.id)).toBeNull();
    const res = await h.request("GET", "/public/v1/contacts", { headers: { authorization: `Bearer ${own}` } });
    expect(rateHeaders(res)).toEqual({ policy: '"read";q=300;w=6', limit: '"read";r=299;t=1', retryAfter: null });
    const write = await h.request("POST", "/public/v1/contacts", { body: { first_name: "R" }, headers: { authorization: `Bearer ${own}` } });
    expect(rateHeaders(write)).toEqual({ policy: '"write";q=3;w=2', limit: '"write";r=2;t=1', retryAfter: null });
  });
});

describe("rate limits: over the limit", () => {
  test("429 problem with Retry-After; honouring Retry-After gets the next request through", async () => {
    h = await createHarness({ rateWritePerSecond: 1, rateWriteBurst: 3 });
    for (let i = 0; i < 3; i++) expect((await h.request("POST", "/public/v1/contacts", { body: { first_name: `n${i}` } })).status).toBe(201);
    const refused = await h.json("POST", "/public/v1/contacts", { body: { first_name: "refused" } });
    expect(refused.status).toBe(429);
    expect(refused.headers.get("content-type")).toBe("application/problem+json");
    expect(refused.body).toEqual({
      type: "urn:crm:problem:rate-limited",
      title: "Too Many Requests",
      status: 429,
      detail: "This API token may make 1 writes per second (bursts of 3); retry after 1 s.",
    });
    expect(rateHeaders(refused)).toEqual({ policy: '"write";q=3;w=3', limit: '"write";r=0;t=3', retryAfter: "1" });
    expect(await contactCount(h)).toBe(3);
    await Bun.sleep(Number(refused.headers.get("retry-after")) * 1000);
    const next = await h.json("POST", "/public/v1/contacts", { body: { first_name: "after waiting" } });
    expect(next.status).toBe(201);
    expect(await contactCount(h)).toBe(4);
  });

  // s36 ratelimits audit: a 429's line named neither the token nor the bucket nor the client, so an operator could not tell which integration hit its limit.
  test("a 429's request line names the bucket, the token's id (never the token) and the client address", async () => {
    const lines: Record<string, any>[] = [];
    const dataDir = mkdtempSync(join(tmpdir(), "crm-rate-"));
    const config = { ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "info" as const, rateReadPerSecond: 1, rateReadBurst: 1, rateWritePerSecond: 1, rateWriteBurst: 1, authFailuresPerMinute: 1 };
    const running = await startServer(config, createLogger("info", (line) => lines.push(JSON.parse(line))));
    try {
      const { token, info } = await createApiToken(running.runtime.db, "throttled");
      const url = `http://127.0.0.1:${running.server.port}/public/v1/contacts`;
      const statuses: number[] = [];
      for (const init of [{}, { method: "POST", body: "{}" }]) {
        for (let i = 0; i < 2; i++) statuses.push((await fetch(url, { ...init, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } })).status);
      }
      for (let i = 0; i < 2; i++) statuses.push((await fetch(url, { headers: { authorization: "Bearer crm_wrong" } })).status);
      expect(statuses).toEqual([200, 429, 422, 429, 401, 429]);
      const refused = () => lines.filter((l) => l.msg === "request" && l.status === 429);
      await waitFor(() => refused().length === 3, "the three 429s' request lines");
      expect(refused().map(({ method, problem, bucket, token_id, client }) => ({ method, problem, bucket, token_id, client }))).toEqual([
        { method: "GET", problem: "rate-limited", bucket: "read", token_id: info.id, client: "127.0.0.1" },
        { method: "POST", problem: "rate-limited", bucket: "write", token_id: info.id, client: "127.0.0.1" },
        { method: "GET", problem: "rate-limited", bucket: "failed-auth", token_id: undefined, client: "127.0.0.1" },
      ]);
      expect(JSON.stringify(lines)).not.toContain(token);
    } finally {
      await running.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  // s37 cuthold: the 429s were counted under status="429" alone, so a dashboard could not tell a token over its reads from one over its writes, or from guessed tokens.
  test("/metrics counts a 429 under the bucket that refused it, beside its method, route and status", async () => {
    const metricsToken = "metrics-token-for-tests-0001";
    h = await createHarness({ rateReadPerSecond: 1, rateReadBurst: 1, rateWritePerSecond: 1, rateWriteBurst: 1, authFailuresPerMinute: 1, metricsToken });
    const statuses: number[] = [];
    for (let i = 0; i < 2; i++) statuses.push((await h.request("GET", "/public/v1/contacts")).status);
    for (let i = 0; i < 2; i++) statuses.push((await h.request("POST", "/public/v1/contacts", { body: { first_name: `n${i}` } })).status);
    for (let i = 0; i < 2; i++) statuses.push((await h.request("GET", "/public/v1/accounts", { headers: { authorization: "Bearer crm_wrong" } })).status);
    expect(statuses).toEqual([200, 429, 201, 429, 401, 429]);
    const scrape = await h.request("GET", "/metrics", { headers: { authorization: `Bearer ${metricsToken}` } });
    expect(scrape.status).toBe(200);
    const counted = parseExposition(await scrape.text()).samples.filter((s) => s.name === "crm_http_requests_total" && s.labels.route !== "/metrics");
    expect(counted).toEqual([
      { name: "crm_http_requests_total", labels: { method: "GET", route: "/public/v1/contacts", status: "200" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "GET", route: "/public/v1/contacts", status: "429", bucket: "read" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "POST", route: "/public/v1/contacts", status: "201" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "POST", route: "/public/v1/contacts", status: "429", bucket: "write" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "GET", route: "/public/v1/accounts", status: "401" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "GET", route: "/public/v1/accounts", status: "429", bucket: "failed-auth" }, value: 1 },
    ]);
  });

  test("a refused request is refused before its body is read or validated", async () => {
    h = await createHarness({ rateWritePerSecond: 1, rateWriteBurst: 1 });
    expect((await h.request("POST", "/public/v1/contacts", { body: { first_name: "R" } })).status).toBe(201);
    const res = await h.json("POST", "/public/v1/contacts", { body: '{"a":1,"a":2}' });
    expect(res.status).toBe(429);
  });

  test("failed authentication is throttled per client address: 429 instead of 401, a valid token still passes", async () => {
    h = await createHarness({ authFailuresPerMinute: 60 });
    for (let i = 0; i < 60; i++) {
      const res = await h.request("GET", "/public/v1/contacts", { headers: { authorization: i % 2 ? "Bearer crm_guess" : "" } });
      expect(res.status).toBe(401);
    }
    const refused = await h.json("GET", "/public/v1/contacts", { headers: { authorization: "Bearer crm_guessAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" } });
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({
      type: "urn:crm:problem:rate-limited",
      title: "Too Many Requests",
      status: 429,
      detail: "Too many requests without a valid API token from this address (60 per minute); retry after 1 s.",
    });
    expect(rateHeaders(refused)).toEqual({ policy: '"failed-auth";q=60;w=60', limit: '"failed-auth";r=0;t=60', retryAfter: "1" });
    expect((await h.request("GET", "/public/v1/contacts")).status).toBe(200);
    await Bun.sleep(1000);
    expect((await h.request("GET", "/public/v1/contacts", { headers: { authorization: "" } })).status).toBe(401);
  });
});

describe("rate limits: the buckets themselves", () => {
  test("a bucket refills at its rate and never beyond its burst", () => {
    const buckets = new TokenBuckets();
    const policy = { name: "p", perSecond: 2, burst: 4 };
    const taken = [0, 0, 0, 0, 0].map(() => buckets.take("k", policy, 0).allowed);
    expect(taken).toEqual([true, true, true, true, false]);
    expect(buckets.take("k", policy, 0)).toEqual({ allowed: false, remaining: 0, resetSeconds: 2, retryAfterSeconds: 1 });
    expect(buckets.take("k", policy, 500).allowed).toBe(true);
    expect(buckets.take("k", policy, 60_000)).toEqual({ allowed: true, remaining: 3, resetSeconds: 1, retryAfterSeconds: 0 });
  });

  test("addresses cannot grow the map without bound: full buckets are swept, then the oldest dropped", () => {
    const buckets = new TokenBuckets(100);
    const policy = { name: "p", perSecond: 1, burst: 1 };
    for (let i = 0; i < 1000; i++) buckets.take(`address-${i}`, policy, i);
    expect(buckets.size).toBeLessThanOrEqual(100);
    for (let i = 0; i < 1000; i++) buckets.take(`spent-${i}`, policy, 5000);
    expect(buckets.size).toBeLessThanOrEqual(100);
  });
});

describe("rate limits: what is kept per client address or token", () => {
  test("a map swept by makeRoom loses its spent entries first, then its oldest, to under 90% of its cap", () => {
    const map = new Map([1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((n) => [`key-${n}`, n]));
    makeRoom(map, 11, (n) => n % 2 === 0);
    expect([...map.keys()]).toEqual(["key-1", "key-2", "key-3", "key-4", "key-5", "key-6", "key-7", "key-8", "key-9", "key-10"]);
    makeRoom(map, 10, (n) => n === 4 || n === 8);
    expect([...map.keys()]).toEqual(["key-1", "key-2", "key-3", "key-5", "key-6", "key-7", "key-9", "key-10"]);
    makeRoom(map, 8, () => false);
    expect([...map.keys()]).toEqual(["key-2", "key-3", "key-5", "key-6", "key-7", "key-9", "key-10"]);
  });

  test(`the rate limits of the tokens seen are kept for ${MAX_TRACKED_KEYS} tokens at most, and a token's own are read again once dropped`, async () => {
    h = await createHarness();
    const rates = h.rt.rateLimits;
    const { info } = await createApiToken(h.rt.db, "own rate", Date.now(), { readPerSecond: 1, readBurst: 3, writePerSecond: 1, writeBurst: 1 });
    await rates.loadPolicies(info.id);
    // Read 100 at a time, as concurrent requests would: one at a time, the 100,000 reads took half a minute on PostgreSQL.
    for (let i = 0; i < MAX_TRACKED_KEYS; i += 100) await Promise.all(Array.from({ length: 100 }, (_, j) => rates.loadPolicies(`tok_unknown_${i + j}`)));
    expect(rates.tokenPoliciesKept).toBeLessThanOrEqual(MAX_TRACKED_KEYS);
    // The oldest went first: admitted unread, the token would be held to the server's defaults.
    expect(rates.admitToken(info.id, "GET")["ratelimit-policy"]).toBe(`"read";q=${h.rt.config.rateReadBurst};w=${Math.ceil(h.rt.config.rateReadBurst / h.rt.config.rateReadPerSecond)}`);
    await rates.loadPolicies(info.id);
    expect(rates.admitToken(info.id, "GET")["ratelimit-policy"]).toBe('"read";q=3;w=3');
  });
});

describe("rate limits: token create --rate", () => {
  const run = (args: string[]) => Bun.spawnSync([process.execPath, "server/main.ts", ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });

  sqliteOnly("stores the token's own rate; a malformed rate stops with one line naming the option", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "crm-rate-"));
    try {
      expect(run(["migrate", "--data-dir", dataDir]).exitCode).toBe(0);
      const created = run(["token", "create", "--name", "bulk", "--rate", "20:40,5", "--json", "--data-dir", dataDir]);
      expect(created.exitCode).toBe(0);
      const info = JSON.parse(created.stdout.toString());
      expect(info.rate).toEqual({ read_per_second: 20, read_burst: 40, write_per_second: 5, write_burst: 10 });
      const db = openDatabase(databasePath(dataDir));
      expect(await tokenRate(db, info.id)).toEqual({ readPerSecond: 20, readBurst: 40, writePerSecond: 5, writeBurst: 10 });
      db.close();
      const listed = run(["token", "list", "--data-dir", dataDir]);
      expect(listed.stdout.toString()).toContain(`${info.id}  `);
      expect(listed.stdout.toString()).toContain("rate 20:40,5:10");
      // s36 ratelimits audit: a rate over 500,000 without its burst was refused as malformed, for a default burst past a cap nothing named.
      const fast = run(["token", "create", "--name", "fast", "--rate", "600000,1", "--json", "--data-dir", dataDir]);
      expect([fast.exitCode, JSON.parse(fast.stdout.toString()).rate]).toEqual([0, { read_per_second: 600000, read_burst: 1000000, write_per_second: 1, write_burst: 2 }]);
      for (const bad of ["20", "0,1", "a,b", "1:0,1", "1,1,1", "2000000,1", "1:1000001,1"]) {
        const refused = run(["token", "create", "--name", "bad", "--rate", bad, "--data-dir", dataDir]);
        expect({ exitCode: refused.exitCode, stderr: refused.stderr.toString(), stdout: refused.stdout.toString() }).toEqual({
          exitCode: 2,
          stderr: `crm: invalid --rate: ${JSON.stringify(bad)} is not READS[:BURST],WRITES[:BURST] in requests per second, each rate and burst at most 1,000,000, e.g. 100:200,50:100\n`,
          stdout: "",
        });
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
