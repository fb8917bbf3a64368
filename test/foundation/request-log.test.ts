import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { addOperator, ConsoleClient } from "../console/support.ts";
import { createLogger } from "../../server/shared/log.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { waitFor } from "../webhooks/support.ts";
import { call, loggedApp } from "./support.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const auth = () => ({ authorization: `Bearer ${h.token}` });
/**
 * loggedRequests waits until `count` request lines are logged: a line is written after its
 * response is handed back, later still on a busy machine.
 */
const loggedRequests = (lines: { msg?: unknown; path?: unknown }[], count: number, path?: string) =>
  waitFor(() => lines.filter((l) => l.msg === "request" && (path === undefined || l.path === path)).length >= count, `${count} request lines logged`);

describe("log lines", () => {
  test("a value's C1 controls, DEL, line separators and bidi controls are escaped as its C0 controls are: no reader (Python's splitlines, Java's, .NET's) splits one line in two, and no terminal acts on them", () => {
    const lines: string[] = [];
    const text = "a\nb\u0085c\u009b31md\u007fe\u2028f\u2029g\u202eh\u00a0é";
    createLogger("info", (line) => lines.push(line)).info(`msg ${text}`, { [`key ${text}`]: text });
    expect(lines).toHaveLength(1);
    const escaped = String.raw`a\nb\u0085c\u009b31md\u007fe\u2028f\u2029g\u202eh` + "\u00a0é";
    expect(lines[0]!.replace(/^\{"time":"[^"]+",/, "")).toBe(`"level":"info","msg":"msg ${escaped}","key ${escaped}":"${escaped}"}`);
    expect(JSON.parse(lines[0]!)).toEqual({ time: expect.any(String), level: "info", msg: `msg ${text}`, [`key ${text}`]: text });
  });
});

describe("request log: happy paths", () => {
  test("one JSON line per request with method, path, status, duration, request id and the API token's id", async () => {
    const { app, lines } = loggedApp(h);
    const token = await h.rt.db.get<{ id: string }>("SELECT id FROM api_tokens WHERE name = 'test'");
    const created = await call(app, "POST", "/public/v1/contacts", { headers: auth(), body: { first_name: "Ada" } });
    const listed = await call(app, "GET", "/public/v1/contacts?per_page=5", { headers: auth() });
    await loggedRequests(lines, 2);
    const requests = lines.filter((l) => l.msg === "request");
    expect(requests).toEqual([
      { time: expect.any(String), level: "info", msg: "request", request_id: created.headers.get("x-request-id"), token_id: token!.id, method: "POST", path: "/public/v1/contacts", status: 201, duration_ms: expect.any(Number) },
      { time: expect.any(String), level: "info", msg: "request", request_id: listed.headers.get("x-request-id"), token_id: token!.id, method: "GET", path: "/public/v1/contacts", status: 200, duration_ms: expect.any(Number) },
    ]);
    for (const line of requests) expect(line.duration_ms).toBeGreaterThanOrEqual(0);
  });

  test("error responses are logged with their status and, for a problem answer, its type (problem), including the browser refusal and the console's redirect to sign in", async () => {
    const { app, lines } = loggedApp(h);
    const cases: [string, string, Record<string, string>, number, string | undefined][] = [
      ["GET", "/public/v1/contacts", {}, 401, "unauthorized"],
      ["GET", "/nope", auth(), 404, "not-found"],
      ["PUT", "/public/v1/contacts", auth(), 405, "method-not-allowed"],
      ["GET", "/public/v1/contacts?per_page=0", auth(), 422, "validation"],
      ["GET", "/public/v1/contacts", { ...auth(), origin: "https://app.example" }, 403, "browser-request"],
      ["OPTIONS", "/public/v1/contacts", { origin: "https://app.example", "access-control-request-method": "POST" }, 403, "browser-request"],
      ["GET", `/public/v1/contacts?q=${"x".repeat(5000)}`, auth(), 414, "uri-too-long"],
      // the console sends a visitor without a session to sign in, from a page that exists or not
      ["GET", "/console/contacts", {}, 303, undefined],
      ["GET", "/console/no-such-page", {}, 303, undefined],
    ];
    const ids: string[] = [];
    for (const [method, path, headers, status] of cases) {
      const res = await call(app, method, path, { headers });
      expect(res.status).toBe(status);
      ids.push(res.headers.get("x-request-id")!);
    }
    await loggedRequests(lines, cases.length);
    // lines written after the response can land after later requests' lines: order by request id
    const requests = lines.filter((l) => l.msg === "request").sort((a, b) => (a.request_id < b.request_id ? -1 : 1));
    expect(requests.map((l) => [l.method, l.path, l.status, l.request_id, l.problem])).toEqual(cases.map(([method, path, , status, problem], i) => [method, path.split("?")[0], status, ids[i], problem]));
  });
});

describe("request log: probes", () => {
  test("successful /healthz, /readyz and /metrics requests (with a trailing / too) log at debug, below the default info; failing probes and API requests at info", async () => {
    const metricsToken = "metrics-token-for-tests-0001";
    const probed = await createHarness({ metricsToken });
    probed.rt.deliveries.start(); // readiness needs the delivery loop
    try {
      const requests: [string, Record<string, string>, number][] = [
        ["/healthz", {}, 200],
        ["/readyz", {}, 200],
        ["/healthz/", {}, 200],
        ["/metrics", { authorization: `Bearer ${metricsToken}` }, 200],
        ["/metrics", {}, 401],
        ["/public/v1/users", { authorization: `Bearer ${probed.token}` }, 200],
      ];
      const logged = async (level: "info" | "debug", count: number) => {
        const { app, lines } = loggedApp(probed, level);
        for (const [path, headers, status] of requests) expect([path, (await call(app, "GET", path, { headers })).status]).toEqual([path, status]);
        await loggedRequests(lines, count);
        // a line is written after its response, so order by request id, not by arrival
        const ordered = lines.filter((l) => l.msg === "request").sort((a, b) => (a.request_id < b.request_id ? -1 : 1));
        return ordered.map((l) => [l.level, l.path, l.status]);
      };
      expect(await logged("info", 2)).toEqual([
        ["info", "/metrics", 401],
        ["info", "/public/v1/users", 200],
      ]);
      expect(await logged("debug", 6)).toEqual([
        ["debug", "/healthz", 200],
        ["debug", "/readyz", 200],
        ["debug", "/healthz/", 200],
        ["debug", "/metrics", 200],
        ["info", "/metrics", 401],
        ["info", "/public/v1/users", 200],
      ]);
    } finally {
      await probed.rt.deliveries.stop(0);
      await probed.close();
    }
  });
});

describe("request log: x-request-id", () => {
  test("a safe incoming id is echoed and logged", async () => {
    const { app, lines } = loggedApp(h);
    for (const id of ["abc-123", "trace.id:42_x", "A".repeat(100)]) {
      const res = await call(app, "GET", "/public/v1/users", { headers: { ...auth(), "x-request-id": id } });
      expect(res.headers.get("x-request-id")).toBe(id);
    }
    await loggedRequests(lines, 3);
    expect(lines.filter((l) => l.msg === "request").map((l) => l.request_id)).toEqual(["abc-123", "trace.id:42_x", "A".repeat(100)]);
  });

  test("an unsafe or oversized incoming id is replaced by a new one", async () => {
    const { app, lines } = loggedApp(h);
    for (const id of ["has space", "a\"b", "<script>", "A".repeat(101), "a\tb", ""]) {
      const res = await call(app, "GET", "/public/v1/users", { headers: { ...auth(), "x-request-id": id } });
      expect(res.headers.get("x-request-id")).toMatch(/^req_[0-9A-Z]{26}$/);
    }
    await loggedRequests(lines, 6);
    for (const line of lines.filter((l) => l.msg === "request")) expect(line.request_id).toMatch(/^req_[0-9A-Z]{26}$/);
  });

  test("an id shaped like one of the service's secrets is replaced, never echoed or logged: an API token, a signing secret, a console cookie or CSRF token", async () => {
    const { app, lines, raw } = loggedApp(h);
    const subscription = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "https://192.0.43.10/crm", events: ["contact.created"] } });
    await addOperator(h.rt.db);
    const browser = new ConsoleClient((request) => app.handle(request));
    expect((await browser.signIn()).status).toBe(303);
    const secrets = [
      h.token,
      subscription.body.data.secret,
      // the Standard Webhooks specification's example secret: base64 without padding, made of safe characters
      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
      ...browser.cookies.values(),
      browser.csrf,
    ];
    expect(secrets.length).toBe(6);
    const echoed: string[] = [];
    for (const id of secrets) echoed.push((await call(app, "GET", "/public/v1/users", { headers: { ...auth(), "x-request-id": id } })).headers.get("x-request-id")!);
    await loggedRequests(lines, secrets.length, "/public/v1/users");
    const logged = lines.filter((l) => l.msg === "request" && l.path === "/public/v1/users").map((l) => l.request_id);
    expect([echoed.length, logged.length]).toEqual([secrets.length, secrets.length]);
    expect(secrets.filter((secret) => raw.some((line) => line.includes(secret)) || echoed.includes(secret))).toEqual([]);
    for (const id of [...echoed, ...logged]) expect(id).toMatch(/^req_[0-9A-Z]{26}$/);
  });

  test("an id equal to the metrics token, whatever its shape, is replaced as a secret-shaped one is; another id of that shape is kept", async () => {
    const metricsToken = "scrape-token.for:tests-0002";
    const scraped = await createHarness({ metricsToken });
    try {
      const { app, lines, raw } = loggedApp(scraped);
      const asked: [string, Record<string, string>][] = [
        ["/metrics", { authorization: `Bearer ${metricsToken}`, "x-request-id": metricsToken }],
        ["/public/v1/users", { authorization: `Bearer ${scraped.token}`, "x-request-id": metricsToken }],
        ["/public/v1/users", { authorization: `Bearer ${scraped.token}`, "x-request-id": "scrape-token.for:tests-0003" }],
      ];
      const echoed = [];
      for (const [path, headers] of asked) {
        const res = await call(app, "GET", path, { headers });
        echoed.push([path, res.status, res.headers.get("x-request-id")]);
      }
      await loggedRequests(lines, asked.length);
      const generated = expect.stringMatching(/^req_[0-9A-Z]{26}$/);
      expect({ echoed, logged: lines.filter((l) => l.msg === "request").length, leaked: raw.filter((line) => line.includes(metricsToken)) }).toEqual({
        echoed: [
          ["/metrics", 200, generated],
          ["/public/v1/users", 200, generated],
          ["/public/v1/users", 200, "scrape-token.for:tests-0003"],
        ],
        logged: 3,
        leaked: [],
      });
    } finally {
      await scraped.close();
    }
  });

  test("every response carries a distinct id", async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 5; i++) ids.add((await h.request("GET", "/public/v1/contacts")).headers.get("x-request-id")!);
    expect(ids.size).toBe(5);
  });
});
