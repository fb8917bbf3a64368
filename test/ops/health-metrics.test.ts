import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG, type Config } from "../../server/config.ts";
import { MIGRATIONS } from "../../server/db/migrations.ts";
import type { Db } from "../../server/db/sql.ts";
import { clientAddress, isLoopbackHost, requestIsHttps, type ClientHints } from "../../server/http/client-address.ts";
import { parseTokenRate } from "../../server/limits/rate-limiter.ts";
import { authorizeMetrics, DatabaseGauges, metricsText, NotReadyLog } from "../../server/ops/service.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { VERSION } from "../../server/version.ts";
import { call, expectProblem } from "../foundation/support.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { parseExposition } from "./prometheus.ts";
import { api, createToken, SOURCE, tempDir, waitUntil } from "./support.ts";

const METRICS_TOKEN = "metrics-token-for-tests-0001";

async function listen(overrides: Partial<Config> = {}): Promise<RunningServer> {
  return await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir: tempDir("metrics"), logLevel: "error", ...overrides }, createLogger("error", () => {}));
}

async function scrape(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}/metrics`, { headers });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

describe("health and readiness: happy paths", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
    h.rt.deliveries.start();
  });
  afterAll(async () => {
    await h.rt.deliveries.stop(0);
    await h.close();
  });

  test("GET /healthz answers without a token", async () => {
    const res = await call(h.app, "GET", "/healthz");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ok", version: VERSION, uptime_seconds: expect.any(Number) });
  });

  test("GET /readyz answers 200 with every check ok, without a token", async () => {
    const res = await call(h.app, "GET", "/readyz");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ready", checks: { database: "ok", migrations: "ok", delivery_loop: "ok" } });
  });

  test("the readiness probe leaves no trace in the database", async () => {
    const trace = async () => ({
      user_version: (await h.rt.db.get<{ user_version: number }>("PRAGMA user_version"))!.user_version,
      migrations: await h.rt.db.all("SELECT version, name, applied_at FROM schema_migrations ORDER BY version"),
    });
    const before = await trace();
    await call(h.app, "GET", "/readyz");
    expect(await trace()).toEqual(before);
  });

  test("the probe writes only when no write committed lately: a commit of the service stands for it, and probes asked meanwhile share one write", async () => {
    const write = h.rt.db.write;
    let writes = 0;
    h.rt.db.write = <T>(work: (tx: Db) => Promise<T>) => {
      writes++;
      return write.call(h.rt.db, work) as Promise<T>;
    };
    const probes = async (count: number) => {
      writes = 0;
      const answers = await Promise.all(Array.from({ length: count }, () => call(h.app, "GET", "/readyz")));
      return { statuses: answers.map((res) => res.status), writes };
    };
    try {
      // A write refused leaves the next probe to write itself: the storage may have refused it.
      await write.call(h.rt.db, async () => Promise.reject(new Error("refused"))).catch(() => {});
      expect(await probes(3)).toEqual({ statuses: [200, 200, 200], writes: 1 });
      // The probe's own commit, like any write's, stands for the probes that follow it closely.
      expect(await probes(1)).toEqual({ statuses: [200], writes: 0 });
      expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Probed" } })).status).toBe(201);
      expect(await probes(2)).toEqual({ statuses: [200, 200], writes: 0 });
    } finally {
      h.rt.db.write = write;
    }
  });
});

/** notReady is the whole 503 body of a /readyz whose checks fail, as anyone gets it: each failing check by its code. */
const notReady = (checks: Record<string, string>) => ({
  type: "urn:crm:problem:not-ready",
  title: "Service Unavailable",
  status: 503,
  detail: `Not ready: ${Object.entries(checks).filter(([, code]) => code !== "ok").map(([name, code]) => `${name}: ${code}`).join("; ")}. The service's log says why.`,
  checks,
});

/** readyz asks /readyz as anyone, and as a request that may read /metrics (the harness's metrics token), and answers both. */
async function readyz(h: Harness) {
  return [await call(h.app, "GET", "/readyz"), await call(h.app, "GET", "/readyz", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })] as const;
}

describe("readiness: not ready answers 503 problem+json naming the failing check by a code; its reasons only to a request that may read /metrics", () => {
  test("a database that cannot be written", async () => {
    const h = await createHarness({ metricsToken: METRICS_TOKEN });
    // The writer connection refuses every change, as a read-only file would. The harness's token
    // committed just now, which stands for the probe's write until a write is refused (WriteProbe).
    h.db.sqlite.run("PRAGMA query_only = ON");
    try {
      expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Refused" } })).status).toBe(503);
      const [res, trusted] = await readyz(h);
      expectProblem(res, 503, "not-ready");
      expect(res.body).toEqual(notReady({ database: "storage-read-only", migrations: "ok", delivery_loop: "not-running" }));
      expect(trusted.body.checks).toEqual(res.body.checks);
      expect(trusted.body.reasons).toEqual({ database: expect.stringContaining("readonly"), delivery_loop: "not running" });
      expect(trusted.body.detail).toStartWith("Not ready: database: ");
    } finally {
      h.db.sqlite.run("PRAGMA query_only = OFF");
      await h.close();
    }
  });

  test("a delivery loop that is not running", async () => {
    const logged: Record<string, unknown>[] = [];
    const h = await createHarness({ metricsToken: METRICS_TOKEN }, { log: createLogger("warn", (line) => logged.push(JSON.parse(line))) });
    const [res, trusted] = await readyz(h);
    expectProblem(res, 503, "not-ready");
    expect(res.body).toEqual(notReady({ database: "ok", migrations: "ok", delivery_loop: "not-running" }));
    expect(trusted.body).toEqual({ ...res.body, detail: "Not ready: delivery_loop: not running.", reasons: { delivery_loop: "not running" } });
    // The reasons are logged once while they stay the same (a load balancer probes every few seconds).
    expect(logged.map(({ time, ...line }) => line)).toEqual([{ level: "warn", msg: "not ready", reasons: { delivery_loop: "not running" } }]);
    await h.close();
  });

  test("not ready is logged when the instance becomes not ready, then at most once a minute whatever its reasons, ready answers between or not; ready again is logged after a logged not ready", async () => {
    const logged: Record<string, unknown>[] = [];
    const log = createLogger("info", (line) => logged.push(JSON.parse(line)));
    const h = await createHarness({ metricsToken: METRICS_TOKEN }, { log });
    const readiness = () => logged.filter((line) => line.msg === "not ready" || line.msg === "ready again").map(({ time, ...line }) => line);
    const notRunning = { level: "warn", msg: "not ready", reasons: { delivery_loop: "not running" } };
    try {
      await readyz(h);
      h.rt.deliveries.start();
      expect((await call(h.app, "GET", "/readyz")).status).toBe(200);
      await h.rt.deliveries.stop(0);
      await readyz(h);
      // Not ready again within the minute: counted, logged with the next line.
      expect(readiness()).toEqual([notRunning, { level: "info", msg: "ready again" }]);
    } finally {
      await h.close();
    }
    // Two causes taking turns (a database failing now and then beside a stopped loop) are one condition, not a line per answer.
    logged.length = 0;
    const notReadyLog = new NotReadyLog(log);
    const turns: Record<string, string>[] = [{ delivery_loop: "not running" }, { database: "database is locked", delivery_loop: "not running" }, { delivery_loop: "not running" }];
    for (const reasons of turns) notReadyLog.failing(reasons);
    expect(readiness()).toEqual([notRunning]);
    // A check failing every other probe, ready in between, is one condition too: not two lines a probe.
    logged.length = 0;
    const flapping = new NotReadyLog(log);
    for (let probe = 0; probe < 3; probe++) {
      flapping.failing(notRunning.reasons);
      flapping.ready();
    }
    expect(readiness()).toEqual([notRunning, { level: "info", msg: "ready again" }]);
  });

  test("a delivery loop whose every claim fails (a schema it cannot use), until a claim succeeds again; failing again within the minute logs nothing more", async () => {
    const logged: { level: string; msg: string }[] = [];
    const h = await createHarness({ metricsToken: METRICS_TOKEN }, { log: createLogger("info", (line) => logged.push(JSON.parse(line))) });
    h.rt.deliveries.start();
    h.db.sqlite.run("DROP INDEX webhook_deliveries_due_by_subscription");
    h.rt.deliveries.wake();
    await waitUntil(() => h.rt.deliveries.claimFailure !== null, "a claim to fail");
    // Claims are retried every second: the second and third failures add no line.
    const since = h.rt.deliveries.claimFailure!.since;
    await waitUntil(() => Date.now() > since + 2200, "two more claims to fail");
    const [res, trusted] = await readyz(h);
    expectProblem(res, 503, "not-ready");
    expect(res.body.checks).toEqual({ database: "ok", migrations: "ok", delivery_loop: "claims-failing" });
    expect(trusted.body.reasons).toEqual({
      delivery_loop: expect.stringMatching(/^claims failing since \d{4}-\d\d-\d\dT[\d:.]+Z: SQLiteError: no such index: webhook_deliveries_due_by_subscription$/),
    });
    h.db.sqlite.run("CREATE INDEX webhook_deliveries_due_by_subscription ON webhook_deliveries (subscription_id, next_attempt_at, id) WHERE status = 'pending'");
    await waitUntil(() => h.rt.deliveries.claimFailure === null, "a claim to succeed again");
    expect((await call(h.app, "GET", "/readyz")).body.checks).toEqual({ database: "ok", migrations: "ok", delivery_loop: "ok" });
    // Failing and working by turns (a disk nearly full, a small claim fitting now and then) adds no line within the minute.
    h.db.sqlite.run("DROP INDEX webhook_deliveries_due_by_subscription");
    h.rt.deliveries.wake();
    await waitUntil(() => h.rt.deliveries.claimFailure !== null, "a claim to fail again");
    h.db.sqlite.run("CREATE INDEX webhook_deliveries_due_by_subscription ON webhook_deliveries (subscription_id, next_attempt_at, id) WHERE status = 'pending'");
    await waitUntil(() => h.rt.deliveries.claimFailure === null, "a claim to succeed again");
    // The loop's sweep of stopped subscriptions' leftovers reads through the dropped index too, when
    // it runs after the drop: its own line, spaced apart, is not the claims' to count.
    const claimLines = logged.filter((line) => line.msg.startsWith("webhook delivery loop") && !line.msg.includes("disabled or deleted subscription"));
    expect(claimLines.map((line) => `${line.level} ${line.msg}`)).toEqual([
      "error webhook delivery loop: claim failed",
      "info webhook delivery loop: claims work again",
    ]);
    await h.rt.deliveries.stop(0);
    await h.close();
  });

  test("a migration embedded in this version that the database lacks", async () => {
    const h = await createHarness({ metricsToken: METRICS_TOKEN });
    h.rt.deliveries.start();
    const last = MIGRATIONS.at(-1)!;
    await h.rt.db.run("DELETE FROM schema_migrations WHERE version = ?", [last.version]);
    const [res, trusted] = await readyz(h);
    expectProblem(res, 503, "not-ready");
    expect(res.body.checks).toEqual({ database: "ok", migrations: "pending-migrations", delivery_loop: "ok" });
    expect(res.body.detail).toBe("Not ready: migrations: pending-migrations. The service's log says why.");
    expect({ reasons: trusted.body.reasons, detail: trusted.body.detail }).toEqual({ reasons: { migrations: `pending: ${last.name}` }, detail: `Not ready: migrations: pending: ${last.name}.` });
    await h.rt.deliveries.stop(0);
    await h.close();
  });

  test("a migration a newer crm applied under the running instance (started beside it)", async () => {
    const h = await createHarness({ metricsToken: METRICS_TOKEN });
    h.rt.deliveries.start();
    await h.rt.db.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_from_the_future.sql', 0)");
    const [res, trusted] = await readyz(h);
    expectProblem(res, 503, "not-ready");
    expect(res.body.checks).toEqual({ database: "ok", migrations: "newer-migrations", delivery_loop: "ok" });
    expect(trusted.body.reasons).toEqual({ migrations: "migrated by a newer crm: 9999_from_the_future.sql" });
    await h.rt.deliveries.stop(0);
    await h.close();
  });

  test("over HTTP: without a metrics token, a loopback client gets the reasons, one a proxy relayed the codes only; with one, only a request carrying it gets them", async () => {
    const last = MIGRATIONS.at(-1)!;
    for (const metricsToken of ["", METRICS_TOKEN]) {
      const server = await listen({ metricsToken });
      try {
        await server.runtime.db.run("DELETE FROM schema_migrations WHERE version = ?", [last.version]);
        const ask = async (headers: Record<string, string> = {}) => (await fetch(`${server.url}/readyz`, { headers })).json();
        const codes = { checks: { database: "ok", migrations: "pending-migrations", delivery_loop: "ok" } };
        const reasons = { ...codes, reasons: { migrations: `pending: ${last.name}` } };
        const answers = metricsToken ? [ask(), ask({ authorization: `Bearer ${METRICS_TOKEN}` })] : [ask(), ask({ "x-forwarded-for": "203.0.113.7" })];
        const [first, second] = (await Promise.all(answers)).map(({ checks, reasons }) => ({ checks, ...(reasons ? { reasons } : {}) }));
        expect([first, second]).toEqual(metricsToken ? [codes, reasons] : [reasons, codes]);
      } finally {
        await server.stop();
      }
    }
  });
});

describe("metrics: Prometheus text format", () => {
  let running: RunningServer;
  let token: string;
  beforeAll(async () => {
    running = await listen();
    token = createToken(SOURCE, running.runtime.config.dataDir);
  });
  afterAll(async () => {
    await running.stop();
    rmSync(running.runtime.config.dataDir, { recursive: true, force: true });
  });

  test("requests are counted by route pattern and status, with latency histograms, and the scrape parses", async () => {
    const created = await api(running.url, token, "POST", "/public/v1/contacts", { first_name: "Ada" });
    expect(created.status).toBe(201);
    const id: string = created.body.data.id;
    expect((await api(running.url, token, "GET", `/public/v1/contacts/${id}`)).status).toBe(200);
    expect((await api(running.url, token, "GET", "/public/v1/contacts/con_missing")).status).toBe(404);
    expect((await api(running.url, token, "GET", "/no/such/route")).status).toBe(404);

    const res = await scrape(running.url);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const metrics = parseExposition(res.text);
    expect(metrics.value("crm_http_requests_total", { method: "POST", route: "/public/v1/contacts", status: "201" })).toBe(1);
    expect(metrics.value("crm_http_requests_total", { method: "GET", route: "/public/v1/contacts/:id", status: "200" })).toBe(1);
    expect(metrics.value("crm_http_requests_total", { method: "GET", route: "/public/v1/contacts/:id", status: "404" })).toBe(1);
    expect(metrics.value("crm_http_requests_total", { method: "GET", route: "unmatched", status: "404" })).toBe(1);
    expect(metrics.value("crm_http_request_duration_seconds_count", { method: "GET", route: "/public/v1/contacts/:id" })).toBe(2);
    expect(metrics.types.get("crm_http_request_duration_seconds")).toBe("histogram");
    // Raw paths never become labels: the number of series stays bounded whatever clients send.
    expect(res.text).not.toContain(id);
    expect(res.text).not.toContain("/no/such/route");
  });

  test("requests refused before routing (no token, a token over its rate, a browser) are counted under the route pattern they were sent to; a path no route serves stays unmatched", async () => {
    const oneReadASecond = (await createApiToken(running.runtime.db, "one read a second", Date.now(), parseTokenRate("1:1,1:1")!)).token;
    const send = async (method: string, path: string, headers: Record<string, string> = {}) => (await fetch(`${running.url}${path}`, { method, headers })).status;
    expect([
      await send("GET", "/public/v1/accounts", { authorization: `Bearer ${oneReadASecond}` }),
      await send("GET", "/public/v1/accounts", { authorization: `Bearer ${oneReadASecond}` }),
      await send("GET", "/public/v1/accounts/acc_01J00000000000000000000000"),
      await send("HEAD", "/public/v1/accounts/acc_01J00000000000000000000000"),
      await send("DELETE", "/public/v1/webhook-subscriptions/sub_01J00000000000000000000000"),
      await send("POST", "/public/v1/accounts", { origin: "https://pages.example" }),
      await send("GET", "/public/v1/no/such/route"),
    ]).toEqual([200, 429, 401, 401, 401, 403, 401]);

    const res = await scrape(running.url);
    const refused = parseExposition(res.text).samples.filter((s) => s.name === "crm_http_requests_total" && ["401", "403", "429"].includes(s.labels.status!));
    expect(refused).toEqual([
      { name: "crm_http_requests_total", labels: { method: "GET", route: "/public/v1/accounts", status: "429", bucket: "read" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "GET", route: "/public/v1/accounts/:id", status: "401" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "HEAD", route: "/public/v1/accounts/:id", status: "401" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "DELETE", route: "/public/v1/webhook-subscriptions/:subscriptionId", status: "401" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "POST", route: "/public/v1/accounts", status: "403" }, value: 1 },
      { name: "crm_http_requests_total", labels: { method: "GET", route: "unmatched", status: "401" }, value: 1 },
    ]);
    expect(parseExposition(res.text).value("crm_http_request_duration_seconds_count", { method: "DELETE", route: "/public/v1/webhook-subscriptions/:subscriptionId" })).toBe(1);
    expect(res.text).not.toContain("/no/such/route");
  });

  test("requests the limits refuse before routing (a query string past 4 KiB: 414) are counted under the route pattern they were sent to; a path no route serves stays unmatched", async () => {
    const long = `q=${"x".repeat(5000)}`;
    const send = async (path: string) => (await fetch(`${running.url}${path}?${long}`, { headers: { authorization: `Bearer ${token}` } })).status;
    expect([await send("/public/v1/users"), await send("/public/v1/users"), await send("/public/v1/nowhere")]).toEqual([414, 414, 414]);
    const refused = parseExposition((await scrape(running.url)).text).samples.filter((s) => s.name === "crm_http_requests_total" && s.labels.status === "414");
    expect(refused).toEqual([
      { name: "crm_http_requests_total", labels: { method: "GET", route: "/public/v1/users", status: "414" }, value: 2 },
      { name: "crm_http_requests_total", labels: { method: "GET", route: "unmatched", status: "414" }, value: 1 },
    ]);
  });

  test("delivery and process gauges are present", async () => {
    const metrics = parseExposition((await scrape(running.url)).text);
    for (const name of ["crm_webhook_queue_depth", "crm_webhook_oldest_pending_age_seconds", "crm_webhook_delivery_loop_running", "process_resident_memory_bytes", "process_start_time_seconds"]) {
      expect(metrics.types.get(name)).toBe("gauge");
    }
    expect(metrics.value("crm_webhook_queue_depth")).toBe(0);
    expect(metrics.value("crm_webhook_delivery_loop_running")).toBe(1);
    expect(metrics.value("crm_build_info", { version: VERSION, commit: "source" })).toBe(1);
    expect(metrics.value("crm_database_up")).toBe(1);
  });
});

describe("metrics: a database that gives the gauges no answer", () => {
  test("(a frozen server, a pool with no connection free) the scrapes answer without them after their deadline, crm_database_up 0, sharing one read between them", async () => {
    const h = await createHarness();
    try {
      let reads = 0;
      let answer!: () => void;
      const answered = new Promise<void>((resolve) => (answer = resolve));
      const readWithin = h.rt.db.readWithin.bind(h.rt.db);
      h.rt.db.readWithin = (limits, work) => {
        reads += 1;
        return answered.then(() => readWithin(limits, work));
      };
      const scraped = (await Promise.all([metricsText(h.rt), metricsText(h.rt), metricsText(h.rt)])).map((text) => {
        const metrics = parseExposition(text);
        return { database_up: metrics.value("crm_database_up"), queue_depth: metrics.value("crm_webhook_queue_depth"), up: metrics.value("crm_up") };
      });
      expect({ scraped, reads }).toEqual({ scraped: Array(3).fill({ database_up: 0, queue_depth: undefined, up: 1 }), reads: 1 });
      answer();
      await waitUntil(async () => parseExposition(await metricsText(h.rt)).value("crm_database_up") === 1, "the gauges back once the database answers");
      expect(parseExposition(await metricsText(h.rt)).value("crm_webhook_queue_depth")).toBe(0);
    } finally {
      await h.close();
    }
  });
});

describe("metrics: a database that refuses the gauges", () => {
  test("the scrapes left out within the minute log one warn line on each instance's log (its runtime's DatabaseGauges), the database refusing them", async () => {
    const h = await createHarness();
    try {
      const locked = Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" });
      h.rt.db.readWithin = () => Promise.reject(locked);
      const lines: { instance: string; msg: string; error: string }[] = [];
      const instances = ["a", "b"].map((instance) => ({ instance, gauges: new DatabaseGauges(h.rt.db, createLogger("warn", (line) => lines.push({ instance, ...JSON.parse(line) }))) }));
      const failures: unknown[] = [];
      for (let scrape = 0; scrape < 3; scrape++) {
        for (const { gauges } of instances) {
          const read = await gauges.values();
          failures.push("failure" in read ? read.failure : read.values);
          if ("failure" in read) gauges.leftOut(read.failure);
        }
      }
      const msg = "/metrics: the gauges read from the database were left out of the scrape (crm_database_up 0): they were not read within 2 s, or the database refused them";
      expect({ failures, lines: lines.map(({ instance, msg, error }) => ({ instance, msg, error })) }).toEqual({
        failures: Array(6).fill(locked),
        lines: [
          { instance: "a", msg, error: "Error: database is locked" },
          { instance: "b", msg, error: "Error: database is locked" },
        ],
      });
    } finally {
      await h.close();
    }
  });
});

describe("metrics: access (security)", () => {
  test("without a metrics token: a loopback client is answered", async () => {
    const running = await listen();
    try {
      expect((await scrape(running.url)).status).toBe(200);
    } finally {
      await running.stop();
    }
  });

  test("without a metrics token: a request relayed by a proxy that is not trusted is refused, even from loopback", async () => {
    const running = await listen();
    try {
      for (const header of [{ "x-forwarded-for": "127.0.0.1" }, { forwarded: "for=203.0.113.9" }, { "x-real-ip": "127.0.0.1" }] as Record<string, string>[]) {
        const res = await scrape(running.url, header);
        expect(res.status).toBe(403);
        expect(JSON.parse(res.text)).toEqual({
          type: "urn:crm:problem:forbidden",
          title: "Forbidden",
          status: 403,
          detail: "GET /metrics answers loopback clients only; configure a metrics token (--metrics-token) to scrape from elsewhere.",
        });
      }
    } finally {
      await running.stop();
    }
  });

  test("a browser is refused, loopback or not, token or not: a page rebinding its name to 127.0.0.1 cannot read /metrics", async () => {
    const refusal = {
      type: "urn:crm:problem:browser-request",
      title: "Forbidden",
      status: 403,
      detail: "GET /metrics does not answer browsers (the request carries Origin or Sec-Fetch-Site); scrape it with Prometheus, curl or another HTTP client.",
    };
    const browsers: Record<string, string>[] = [{ origin: "http://attacker.example" }, { origin: "null" }, { "sec-fetch-site": "same-origin" }, { "sec-fetch-site": "none" }];
    for (const config of [{}, { metricsToken: METRICS_TOKEN }]) {
      const running = await listen(config);
      try {
        for (const headers of browsers) {
          const res = await scrape(running.url, { ...headers, authorization: `Bearer ${METRICS_TOKEN}` });
          expect({ headers, status: res.status, type: res.headers.get("content-type"), body: JSON.parse(res.text) }).toEqual({ headers, status: 403, type: "application/problem+json", body: refusal });
        }
      } finally {
        await running.stop();
      }
    }
  });

  test("without a metrics token: a loopback client must address the server as localhost or a loopback address (Host)", async () => {
    const running = await listen();
    const port = new URL(running.url).port;
    try {
      for (const host of [`attacker.example:${port}`, "attacker.example", `localhost.attacker.example:${port}`]) {
        const res = await scrape(running.url, { host });
        expect({ host, status: res.status, type: res.headers.get("content-type"), body: JSON.parse(res.text) }).toEqual({
          host,
          status: 403,
          type: "application/problem+json",
          body: {
            type: "urn:crm:problem:forbidden",
            title: "Forbidden",
            status: 403,
            detail: "GET /metrics without a metrics token answers requests addressed to localhost or a loopback address only (the Host header); scrape 127.0.0.1, or configure a metrics token (--metrics-token).",
          },
        });
      }
      for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, "localhost"]) {
        expect([host, (await scrape(running.url, { host })).status]).toEqual([host, 200]);
      }
    } finally {
      await running.stop();
    }
  });

  test("behind a trusted proxy: any request it relayed is refused without a metrics token, whatever client it names: a proxy that passes the client's own X-Forwarded-For on (setting X-Real-IP only) lets the client name 127.0.0.1; a request relayed by no one is answered", async () => {
    const running = await listen({ trustedProxies: ["127.0.0.1"] });
    try {
      const relayed: Record<string, string>[] = [
        { "x-forwarded-for": "203.0.113.9" },
        { "x-forwarded-for": "127.0.0.1, 203.0.113.9" },
        { "x-forwarded-for": "not-an-address" },
        { "x-forwarded-for": "203.0.113.9, 127.0.0.1" },
        { "x-forwarded-for": "127.0.0.1" },
        { "x-forwarded-for": "::1" },
        { "x-real-ip": "203.0.113.5", "x-forwarded-for": "127.0.0.1" },
      ];
      const statuses = [];
      // nginx sends the proxy_pass address as Host unless told otherwise
      for (const headers of relayed) statuses.push({ headers, status: (await scrape(running.url, { ...headers, host: "127.0.0.1:3000" })).status });
      expect(statuses).toEqual(relayed.map((headers) => ({ headers, status: 403 })));
      expect((await scrape(running.url)).status).toBe(200);
    } finally {
      await running.stop();
    }
    const tokened = await listen({ trustedProxies: ["127.0.0.1"], metricsToken: METRICS_TOKEN });
    try {
      expect((await scrape(tokened.url, { "x-real-ip": "203.0.113.5", "x-forwarded-for": "127.0.0.1", authorization: `Bearer ${METRICS_TOKEN}` })).status).toBe(200);
    } finally {
      await tokened.stop();
    }
  });

  test("behind a trusted proxy: a request it relayed naming the client only in Forwarded or X-Real-IP is refused, its client unknown, not the proxy's loopback", async () => {
    const running = await listen({ trustedProxies: ["127.0.0.1"] });
    try {
      const relayed: Record<string, string>[] = [
        { "x-real-ip": "203.0.113.7" },
        { forwarded: "for=203.0.113.7" },
        { forwarded: "for=127.0.0.1" },
        { "x-real-ip": "127.0.0.1", forwarded: "for=203.0.113.7;proto=https" },
        { "x-forwarded-for": "", "x-real-ip": "203.0.113.7" },
      ];
      const statuses = [];
      // nginx sends the proxy_pass address as Host unless told otherwise
      for (const headers of relayed) statuses.push({ headers, status: (await scrape(running.url, { ...headers, host: "127.0.0.1:3000" })).status });
      expect(statuses).toEqual(relayed.map((headers) => ({ headers, status: 403 })));
      expect((await scrape(running.url, { host: "127.0.0.1:3000" })).status).toBe(200);
    } finally {
      await running.stop();
    }
  });

  test("a request with no known peer (in-process) is not a loopback client", async () => {
    const h = await createHarness();
    const res = await call(h.app, "GET", "/metrics");
    expectProblem(res, 403, "forbidden");
    await h.close();
  });

  test("with a metrics token: only the token opens /metrics, loopback or not", async () => {
    const running = await listen({ metricsToken: METRICS_TOKEN });
    try {
      for (const headers of [{}, { authorization: "Bearer wrong-token-0000000000" }, { authorization: `Basic ${METRICS_TOKEN}` }, { authorization: `Bearer ${METRICS_TOKEN}x` }] as Record<string, string>[]) {
        const res = await scrape(running.url, headers);
        expect(res.status).toBe(401);
        expect(res.headers.get("www-authenticate")).toBe('Bearer realm="metrics"');
        expect(res.headers.get("content-type")).toBe("application/problem+json");
        expect(JSON.parse(res.text).type).toBe("urn:crm:problem:unauthorized");
        expect(res.text).not.toContain(METRICS_TOKEN);
      }
      expect((await scrape(running.url, { authorization: `Bearer ${METRICS_TOKEN}` })).status).toBe(200);
      expect((await scrape(running.url, { authorization: `bearer ${METRICS_TOKEN}`, "x-forwarded-for": "203.0.113.9" })).status).toBe(200);
      expect((await scrape(running.url, { authorization: `Bearer ${METRICS_TOKEN}`, host: "crm.internal:3000" })).status).toBe(200);
    } finally {
      await running.stop();
    }
  });

  test("/metrics reads its token from Authorization as the API reads an API token: Bearer in any case, then one or more spaces or tabs", async () => {
    const running = await listen({ metricsToken: METRICS_TOKEN });
    try {
      const apiToken = (await createApiToken(running.runtime.db, "bearer spacing")).token;
      const statuses = [];
      for (const [scheme, gap] of [["Bearer", " "], ["Bearer", "  "], ["bearer", "   "], ["BEARER", "\t"]]) {
        const metrics = await scrape(running.url, { authorization: `${scheme}${gap}${METRICS_TOKEN}` });
        const api = await fetch(`${running.url}/public/v1/contacts`, { headers: { authorization: `${scheme}${gap}${apiToken}` } });
        statuses.push({ scheme, gap, metrics: metrics.status, api: api.status });
      }
      expect(statuses).toEqual([
        { scheme: "Bearer", gap: " ", metrics: 200, api: 200 },
        { scheme: "Bearer", gap: "  ", metrics: 200, api: 200 },
        { scheme: "bearer", gap: "   ", metrics: 200, api: 200 },
        { scheme: "BEARER", gap: "\t", metrics: 200, api: 200 },
      ]);
    } finally {
      await running.stop();
    }
  });

  test("an API token does not open /metrics", async () => {
    const running = await listen({ metricsToken: METRICS_TOKEN });
    try {
      const token = createToken(SOURCE, running.runtime.config.dataDir);
      expect((await scrape(running.url, { authorization: `Bearer ${token}` })).status).toBe(401);
    } finally {
      await running.stop();
    }
  });

  test("clientAddress believes X-Forwarded-For only from trusted proxies, reading it from the right", () => {
    const hints = (peer: string | null, forwardedFor: string | null): ClientHints => ({ peer, forwardedFor, forwarded: forwardedFor !== null });
    const cases: [ClientHints, string[], string | null][] = [
      [hints("198.51.100.7", "127.0.0.1"), [], "198.51.100.7"],
      [hints("::ffff:127.0.0.1", null), [], "127.0.0.1"],
      [hints("10.0.0.2", "203.0.113.9"), ["10.0.0.2"], "203.0.113.9"],
      [hints("10.0.0.2", "127.0.0.1, 203.0.113.9"), ["10.0.0.2"], "203.0.113.9"],
      [hints("10.0.0.2", "203.0.113.9, 10.0.0.3"), ["10.0.0.2", "10.0.0.3"], "203.0.113.9"],
      [hints("10.0.0.2", "10.0.0.3"), ["10.0.0.2", "10.0.0.3"], "10.0.0.3"],
      [hints("10.0.0.2", null), ["10.0.0.2"], "10.0.0.2"],
      [{ peer: "10.0.0.2", forwardedFor: null, forwarded: true }, ["10.0.0.2"], null],
      [{ peer: "10.0.0.2", forwardedFor: " , ", forwarded: true }, ["10.0.0.2"], null],
      [{ peer: "198.51.100.7", forwardedFor: null, forwarded: true }, ["10.0.0.2"], "198.51.100.7"],
      [hints("10.0.0.2", "garbage"), ["10.0.0.2"], null],
      [hints(null, "127.0.0.1"), ["10.0.0.2"], null],
    ];
    expect(cases.map(([h, trusted]) => clientAddress(h, trusted))).toEqual(cases.map(([, , want]) => want));
  });

  test("requestIsHttps believes X-Forwarded-Proto only from trusted proxies", () => {
    const cases: [string, string | null, string | null, string[], boolean][] = [
      ["https://crm.example.com/console/login", null, null, [], true],
      ["http://127.0.0.1:3000/console/login", "https", "127.0.0.1", ["127.0.0.1"], true],
      ["http://127.0.0.1:3000/console/login", "HTTPS", "::ffff:127.0.0.1", ["127.0.0.1"], true],
      ["http://127.0.0.1:3000/console/login", "http, https", "10.0.0.2", ["10.0.0.2"], true],
      ["http://127.0.0.1:3000/console/login", "http", "127.0.0.1", ["127.0.0.1"], false],
      ["http://127.0.0.1:3000/console/login", null, "127.0.0.1", ["127.0.0.1"], false],
      ["http://127.0.0.1:3000/console/login", "https", "198.51.100.7", ["127.0.0.1"], false],
      ["http://127.0.0.1:3000/console/login", "https", "127.0.0.1", [], false],
      ["http://127.0.0.1:3000/console/login", "https", null, ["127.0.0.1"], false],
    ];
    expect(cases.map(([url, forwardedProto, peer, trusted]) => requestIsHttps({ url, forwardedProto, peer }, trusted))).toEqual(cases.map(([, , , , want]) => want));
  });

  test("authorizeMetrics refuses a client that is not on loopback", () => {
    const config = { ...DEFAULT_CONFIG };
    const scrapeOf = new Request("http://127.0.0.1:3000/metrics", { headers: { host: "127.0.0.1:3000" } });
    expect(() => authorizeMetrics(config, scrapeOf, { peer: "198.51.100.7", forwardedFor: null, forwarded: false })).toThrow("loopback clients only");
    expect(() => authorizeMetrics(config, scrapeOf, { peer: "::1", forwardedFor: null, forwarded: false })).not.toThrow();
    expect(() => authorizeMetrics(config, scrapeOf, { peer: "127.8.9.10", forwardedFor: null, forwarded: false })).not.toThrow();
  });

  test("isLoopbackHost takes localhost and loopback addresses, with or without a port, and no other name", () => {
    const cases: [string | null, boolean][] = [
      ["localhost", true],
      ["LocalHost:3000", true],
      ["127.0.0.1:3000", true],
      ["127.8.9.10", true],
      ["[::1]:3000", true],
      ["[::ffff:127.0.0.1]:3000", true],
      ["attacker.example:3000", false],
      ["localhost.attacker.example", false],
      ["127.0.0.1.nip.io:3000", false],
      ["2130706433", false],
      ["localhost:3000/metrics", false],
      ["user@localhost", false],
      ["::1", false],
      ["", false],
      [null, false],
    ];
    expect(cases.map(([host]) => [host, isLoopbackHost(host)])).toEqual(cases);
  });
});
