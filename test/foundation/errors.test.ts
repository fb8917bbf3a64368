import { SQL } from "bun";
import { Database } from "bun:sqlite";
import { t } from "elysia";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SESSION_COOKIE } from "../../console/http.ts";
import { authenticateBearer, createApiToken } from "../../server/auth/service.ts";
import { databaseFailureOf } from "../../server/db/backend.ts";
import { databasePath, openDatabase, type SqliteDatabase } from "../../server/db/database.ts";
import { schemaChecker } from "../../server/http/schema-errors.ts";
import type { RunningServer } from "../../server/server.ts";
import { sha256 } from "../../server/shared/crypto.ts";
import { settlesWithin } from "../../server/shared/time.ts";
import { closedWithin, Connection, type RawResponse } from "../limits/support.ts";
import { waitUntil } from "../ops/support.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { postgresOnly, sqliteOnly, TEST_BACKEND } from "../support/backend.ts";
import { contactCount, expectProblem, listeningServer, loggedApp, validation } from "./support.ts";

let h: Harness;
let contactId: string;
beforeAll(async () => {
  h = await createHarness();
  contactId = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
});
afterAll(async () => await h.close());

const MIB = 1024 * 1024;

interface Case {
  name: string;
  method: string;
  path: string;
  body?: string | Blob;
  headers?: Record<string, string>;
  status: number;
  slug: string;
  extra?: (res: Response) => void;
}

const CASES: Case[] = [
  { name: "malformed JSON", method: "POST", path: "/public/v1/contacts", body: '{"first_name": ', headers: { "content-type": "application/json" }, status: 400, slug: "invalid-json" },
  { name: "JSON with a trailing comma", method: "POST", path: "/public/v1/accounts", body: '{"name":"x",}', headers: { "content-type": "application/json" }, status: 400, slug: "invalid-json" },
  { name: "body that is not UTF-8", method: "POST", path: "/public/v1/contacts", body: new Blob([new Uint8Array([0x7b, 0xff, 0xfe, 0x7d])]), headers: { "content-type": "application/json" }, status: 400, slug: "invalid-json" },
  {
    name: "no token",
    method: "GET",
    path: "/public/v1/contacts",
    headers: { authorization: "" },
    status: 401,
    slug: "unauthorized",
    extra: (res) => expect(res.headers.get("www-authenticate")).toStartWith("Bearer"),
  },
  { name: "wrong scheme", method: "GET", path: "/public/v1/users", headers: { authorization: "Basic dXNlcjpwYXNz" }, status: 401, slug: "unauthorized", extra: (res) => expect(res.headers.get("www-authenticate")).toStartWith("Bearer") },
  { name: "unknown token", method: "GET", path: "/public/v1/accounts", headers: { authorization: "Bearer crm_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" }, status: 401, slug: "unauthorized", extra: (res) => expect(res.headers.get("www-authenticate")).toStartWith("Bearer") },
  { name: "browser Origin", method: "GET", path: "/public/v1/contacts", headers: { origin: "https://evil.example" }, status: 403, slug: "browser-request" },
  { name: "browser Sec-Fetch-Site", method: "POST", path: "/public/v1/contacts", body: "{}", headers: { "sec-fetch-site": "cross-site", "content-type": "application/json" }, status: 403, slug: "browser-request" },
  { name: "unknown route", method: "GET", path: "/nope", status: 404, slug: "not-found" },
  { name: "unknown API route", method: "GET", path: "/public/v1/nope", status: 404, slug: "not-found" },
  { name: "unknown API version", method: "POST", path: "/public/v2/contacts", body: "{}", headers: { "content-type": "application/json" }, status: 404, slug: "not-found" },
  { name: "unknown contact", method: "GET", path: "/public/v1/contacts/con_missing", status: 404, slug: "not-found" },
  { name: "any method on an unknown API route", method: "PATCH", path: "/public/v1/nope", body: "{}", headers: { "content-type": "application/json" }, status: 404, slug: "not-found" },
  { name: "any method on an unknown deep path", method: "DELETE", path: "/x/y/z", status: 404, slug: "not-found" },
  {
    name: "PUT on the contacts collection",
    method: "PUT",
    path: "/public/v1/contacts",
    body: "{}",
    headers: { "content-type": "application/json" },
    status: 405,
    slug: "method-not-allowed",
    extra: (res) => expect(res.headers.get("allow")?.split(", ").sort()).toEqual(["GET", "HEAD", "POST"]),
  },
  {
    name: "POST on one contact",
    method: "POST",
    path: "/public/v1/contacts/con_x",
    body: "{}",
    headers: { "content-type": "application/json" },
    status: 405,
    slug: "method-not-allowed",
    extra: (res) => expect(res.headers.get("allow")?.split(", ").sort()).toEqual(["DELETE", "GET", "HEAD", "PATCH"]),
  },
  { name: "DELETE on users", method: "DELETE", path: "/public/v1/users", status: 405, slug: "method-not-allowed", extra: (res) => expect(res.headers.get("allow")).toBe("GET, POST, HEAD") },
  { name: "body over 1 MiB", method: "POST", path: "/public/v1/contacts", body: JSON.stringify({ notes: "x".repeat(MIB) }), headers: { "content-type": "application/json" }, status: 413, slug: "body-too-large" },
  { name: "form-encoded body", method: "POST", path: "/public/v1/contacts", body: "first_name=Ada", headers: { "content-type": "application/x-www-form-urlencoded" }, status: 415, slug: "unsupported-media-type" },
  { name: "multipart body", method: "POST", path: "/public/v1/accounts", body: "--b\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nx\r\n--b--\r\n", headers: { "content-type": "multipart/form-data; boundary=b" }, status: 415, slug: "unsupported-media-type" },
  { name: "text/plain body", method: "POST", path: "/public/v1/contacts", body: '{"first_name":"Ada"}', headers: { "content-type": "text/plain" }, status: 415, slug: "unsupported-media-type" },
  { name: "body without content type", method: "POST", path: "/public/v1/contacts", body: '{"first_name":"Ada"}', headers: { "content-type": "" }, status: 415, slug: "unsupported-media-type" },
  { name: "invalid field", method: "POST", path: "/public/v1/contacts", body: '{"email":"x"}', headers: { "content-type": "application/json" }, status: 422, slug: "validation" },
  { name: "invalid PATCH field", method: "PATCH", path: "/public/v1/contacts/CONTACT", body: '{"first_name":7}', headers: { "content-type": "application/json" }, status: 422, slug: "validation" },
  { name: "invalid list parameter", method: "GET", path: "/public/v1/contacts?per_page=0", status: 422, slug: "validation" },
];

describe("errors: every error is problem+json with status equal to the HTTP status", () => {
  for (const c of CASES) {
    test(`${c.status} ${c.name}`, async () => {
      const before = await contactCount(h);
      const res = await h.app.handle(
        new Request(`http://localhost${c.path.replace("CONTACT", contactId)}`, {
          method: c.method,
          headers: { authorization: `Bearer ${h.token}`, ...c.headers },
          body: c.body,
        }),
      );
      const text = await res.text();
      const parsed = { status: res.status, headers: res.headers, body: JSON.parse(text) };
      expectProblem(parsed, c.status, c.slug);
      expect(res.headers.get("x-request-id")).toMatch(/^req_[0-9A-Z]{26}$/);
      expect(text).not.toContain("    at "); // no stack trace
      c.extra?.(res);
      expect(await contactCount(h)).toBe(before);
    });
  }

  test("a body over 1 MiB is refused from Content-Length before it is read", async () => {
    const res = await h.app.handle(
      new Request("http://localhost/public/v1/contacts", {
        method: "POST",
        headers: { authorization: `Bearer ${h.token}`, "content-type": "application/json", "content-length": String(MIB + 1) },
        body: "{}",
      }),
    );
    expect(res.status).toBe(413);
  });

  test("a body of exactly 1 MiB is accepted", async () => {
    // Padded with whitespace: every field has its own, smaller limit (README, Limits).
    const prefix = '{"email":"x@example.com","notes":"x"';
    const body = `${prefix}${" ".repeat(MIB - prefix.length - 1)}}`;
    expect(Buffer.byteLength(body)).toBe(MIB);
    const res = await h.request("POST", "/public/v1/contacts", { body });
    expect(res.status).toBe(201);
    await h.request("DELETE", `/public/v1/contacts/${((await res.json()) as any).data.id}`);
  });
});

describe("errors: through a real server", () => {
  let running: Awaited<ReturnType<typeof listeningServer>>;
  let server: RunningServer;
  let token: string;
  beforeAll(async () => {
    running = await listeningServer("errors");
    ({ server, token } = running);
  });
  afterAll(() => running.stop());

  test("a chunked body over 1 MiB without Content-Length is 413", async () => {
    const chunk = new TextEncoder().encode(`"${"y".repeat(64 * 1024)}",`);
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent === 0) controller.enqueue(new TextEncoder().encode('{"notes":['));
        if (sent > 2 * MIB) {
          controller.enqueue(new TextEncoder().encode('""]}'));
          controller.close();
          return;
        }
        controller.enqueue(chunk);
        sent += chunk.byteLength;
      },
    });
    const res = await fetch(`${server.url}/public/v1/contacts`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: stream,
      // @ts-expect-error Bun and Node need duplex for a streamed request body
      duplex: "half",
    });
    const body = await res.json();
    expect(res.status).toBe(413);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(body).toEqual({ type: "urn:crm:problem:body-too-large", title: "Content Too Large", status: 413, detail: "The request body exceeds the limit of 1048576 bytes (1 MiB)." });
    const count = (await server.runtime.db.get<{ n: number }>("SELECT count(*) AS n FROM contacts"))!.n;
    expect(count).toBe(0);
  });

  test("a HEAD answer is dated as its GET is, once (Bun dates every answer but HEAD's)", async () => {
    const IMF_FIXDATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;
    const dates = [];
    for (const path of ["/healthz", "/public/v1/contacts?per_page=1"]) {
      for (const method of ["GET", "HEAD"]) {
        const res = await fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${token}` } });
        const date = res.headers.get("date") ?? "";
        dates.push({ path, method, status: res.status, dated: IMF_FIXDATE.test(date) && Math.abs(Date.parse(date) - Date.now()) < 60_000 });
      }
    }
    expect(dates).toEqual([
      { path: "/healthz", method: "GET", status: 200, dated: true },
      { path: "/healthz", method: "HEAD", status: 200, dated: true },
      { path: "/public/v1/contacts?per_page=1", method: "GET", status: 200, dated: true },
      { path: "/public/v1/contacts?per_page=1", method: "HEAD", status: 200, dated: true },
    ]);
  });

  // A shared cache that does not look at Authorization (nginx's proxy_cache) would hand one client's contacts to the next.
  test("every API answer, the probes' and the metrics' are Cache-Control: no-store, problems and refusals before routing too; the docs keep their own", async () => {
    const auth = { authorization: `Bearer ${token}` };
    const created = await fetch(`${server.url}/public/v1/contacts`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: '{"first_name":"Ada"}' });
    const contact = `/public/v1/contacts/${((await created.json()) as { data: { id: string } }).data.id}`;
    const answers = [{ method: "POST", path: "/public/v1/contacts", status: created.status, cacheControl: created.headers.get("cache-control") }];
    const asked: { method: string; path: string; headers?: Record<string, string> }[] = [
      { method: "GET", path: "/public/v1/contacts" },
      { method: "GET", path: contact },
      { method: "HEAD", path: contact },
      { method: "PATCH", path: contact, headers: { "if-match": '"9"', "content-type": "application/json" } },
      { method: "GET", path: "/public/v1/contacts/con_missing" },
      { method: "GET", path: "/public/v1/contacts", headers: { authorization: "" } },
      { method: "GET", path: "/public/v1/contacts", headers: { origin: "https://evil.example" } },
      { method: "GET", path: `/public/v1/contacts?a=${"x".repeat(5000)}` },
      { method: "PUT", path: "/public/v1/contacts" },
      { method: "GET", path: "/healthz" },
      { method: "GET", path: "/readyz" },
      { method: "GET", path: "/metrics" },
      { method: "GET", path: "/metrics", headers: { "x-forwarded-for": "203.0.113.9" } },
      { method: "GET", path: "/docs" },
    ];
    for (const { method, path, headers } of asked) {
      const res = await fetch(`${server.url}${path}`, { method, headers: { ...auth, ...headers }, body: method === "PATCH" ? "{}" : undefined });
      answers.push({ method, path: path.split("?")[0]!, status: res.status, cacheControl: res.headers.get("cache-control") });
    }
    const noStore = (method: string, path: string, status: number) => ({ method, path, status, cacheControl: "no-store" });
    expect(answers).toEqual([
      noStore("POST", "/public/v1/contacts", 201),
      noStore("GET", "/public/v1/contacts", 200),
      noStore("GET", contact, 200),
      noStore("HEAD", contact, 200),
      noStore("PATCH", contact, 412),
      noStore("GET", "/public/v1/contacts/con_missing", 404),
      noStore("GET", "/public/v1/contacts", 401),
      noStore("GET", "/public/v1/contacts", 403),
      noStore("GET", "/public/v1/contacts", 414),
      noStore("PUT", "/public/v1/contacts", 405),
      noStore("GET", "/healthz", 200),
      noStore("GET", "/readyz", 200),
      noStore("GET", "/metrics", 200),
      noStore("GET", "/metrics", 403),
      { method: "GET", path: "/docs", status: 200, cacheControl: "no-cache" },
    ]);
  });

  // The router serves /metrics/ as /metrics (and the probes alike): a cache must not keep either spelling's answer.
  test("every refusal /metrics gives is Cache-Control: no-store as its answer is, and so are the metrics and probes asked with a trailing /", async () => {
    const asked: { method: string; path: string; headers?: Record<string, string> }[] = [
      { method: "GET", path: "/metrics", headers: { origin: "https://evil.example" } },
      { method: "GET", path: "/metrics", headers: { host: "crm.example" } },
      { method: "PUT", path: "/metrics" },
      { method: "GET", path: "/metrics?a=%00" },
      { method: "GET", path: `/metrics?a=${"x".repeat(5000)}` },
      { method: "GET", path: "/metrics/" },
      { method: "GET", path: "/metrics/", headers: { host: "crm.example" } },
      { method: "HEAD", path: "/metrics/", headers: { "x-forwarded-for": "203.0.113.9" } },
      { method: "GET", path: "/healthz/" },
      { method: "GET", path: "/readyz/" },
    ];
    const answers = [];
    for (const { method, path, headers } of asked) {
      const res = await fetch(`${server.url}${path}`, { method, headers });
      answers.push({ method, path: path.split("?")[0]!, status: res.status, cacheControl: res.headers.get("cache-control") });
    }
    const noStore = (method: string, path: string, status: number) => ({ method, path, status, cacheControl: "no-store" });
    expect(answers).toEqual([
      noStore("GET", "/metrics", 403),
      noStore("GET", "/metrics", 403),
      noStore("PUT", "/metrics", 405),
      noStore("GET", "/metrics", 400),
      noStore("GET", "/metrics", 414),
      noStore("GET", "/metrics/", 200),
      noStore("GET", "/metrics/", 403),
      noStore("HEAD", "/metrics/", 403),
      noStore("GET", "/healthz/", 200),
      noStore("GET", "/readyz/", 200),
    ]);
  });

  test("a chunked body within 1 MiB is accepted", async () => {
    const res = await fetch(`${server.url}/public/v1/contacts`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: new Blob(['{"first_name":', '"Chunked"}']).stream(),
      // @ts-expect-error Bun and Node need duplex for a streamed request body
      duplex: "half",
    });
    expect(res.status).toBe(201);
    expect(((await res.json()) as any).data.first_name).toBe("Chunked");
  });
});

/**
 * holdingTheDatabase runs `work` while another connection holds the tokens' and sessions' tables,
 * which a token's lookup and a console session's read wait for. `waiting` counts the statements
 * held up.
 */
async function holdingTheDatabase<T extends object>(server: RunningServer, work: (waiting: () => Promise<number>) => Promise<T>): Promise<T> {
  const other = new SQL({ url: server.runtime.config.databaseUrl, max: 1 });
  try {
    return (await other.begin(async (tx) => {
      await tx`LOCK TABLE api_tokens, operator_sessions IN ACCESS EXCLUSIVE MODE`;
      return work(async () => (await tx`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)[0].n);
    })) as T;
  } finally {
    await other.close();
  }
}

describe("errors: a request waiting for the database before its handler", () => {
  let running: Awaited<ReturnType<typeof listeningServer>> | undefined;
  beforeAll(async () => {
    // Bun closes an idle connection 1 to 5 s after its last request (it checks every 4 s). The
    // requests wait for the lock within their lock timeout (the answer timeout), beyond 6 s here.
    if (TEST_BACKEND === "postgres") running = await listeningServer("held", { idleTimeoutSeconds: 1, databaseAnswerTimeoutSeconds: 30 });
  });
  afterAll(() => running?.stop());

  // On SQLite nothing before a handler waits for another process's lock: reads do not, and the bookkeeping gives up.
  postgresOnly("a token not seen yet, a console session due for its visit and an unknown token, waiting for a lock held longer than the idle timeout (but not than the lock timeout), are answered once it is let go; each connection then closes once idle", async () => {
    const { server } = running!;
    const { db } = server.runtime;
    const { token } = await createApiToken(db, "not cached yet");
    const secret = "a-console-session-secret-of-this-test";
    const seen = Date.now() - 120_000;
    await db.write(async (tx) => {
      await tx.run("INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES (?, ?, ?, ?, ?)", ["op_held", "held@example.com", "unused", seen, seen]);
      await tx.run("INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES (?, ?, ?, ?)", [sha256(secret), "op_held", seen, seen]);
    });
    const port = Number(new URL(server.url).port);
    const clients = { api: new Connection(port), console: new Connection(port), refused: new Connection(port) };
    // The answer's status, or how the connection ended without one.
    const statusOf = (answer: Promise<RawResponse>) => answer.then((res) => res.status, (error: Error) => `no answer: ${error.message}`);
    const answers = await holdingTheDatabase(server, async (waiting) => {
      const sent = {
        api: statusOf(clients.api.request("GET", "/public/v1/contacts?per_page=1", { authorization: `Bearer ${token}` })),
        console: statusOf(clients.console.request("GET", "/console/api/deliveries", { cookie: `${SESSION_COOKIE}=${secret}` })),
        refused: statusOf(clients.refused.request("GET", "/public/v1/contacts?per_page=1", { authorization: "Bearer crm_NotAToken0000000000000000000000000000000000" })),
      };
      await waitUntil(async () => (await waiting()) >= 3, "the requests to wait for the lock");
      await Bun.sleep(6000);
      return sent;
    });
    expect({ api: await answers.api, console: await answers.console, refused: await answers.refused }).toEqual({ api: 200, console: 200, refused: 401 });
    expect(await Promise.all(Object.values(clients).map((client) => closedWithin(client, 10_000)))).toEqual([true, true, true]);
  }, 60_000);
});

/**
 * holdingTheBookkeeping runs `work` while another connection holds what a token's last use and a
 * console session's visit write: on SQLite the database's write lock (another process in BEGIN
 * IMMEDIATE, which writes would wait for up to a minute), on PostgreSQL the token's, the
 * operator's and their sessions' rows (an open transaction's SELECT ... FOR UPDATE).
 */
async function holdingTheBookkeeping<T extends object>(tokenId: string, operatorId: string, work: () => Promise<T>): Promise<T> {
  const { db, config } = h.rt;
  if (db.dialect === "sqlite") {
    const other = new Database(databasePath(config.dataDir));
    other.run("BEGIN IMMEDIATE");
    (db as SqliteDatabase).lockWaitMs = 60_000;
    try {
      return await work();
    } finally {
      other.run("ROLLBACK");
      other.close();
      (db as SqliteDatabase).lockWaitMs = 5_000;
    }
  }
  const other = new SQL({ url: config.databaseUrl, max: 1 });
  try {
    return (await other.begin(async (tx) => {
      await tx`SELECT id FROM api_tokens WHERE id = ${tokenId} FOR UPDATE`;
      await tx`SELECT id FROM operators WHERE id = ${operatorId} FOR UPDATE`;
      await tx`SELECT id_hash FROM operator_sessions WHERE operator_id = ${operatorId} FOR UPDATE`;
      return work();
    })) as T;
  } finally {
    await other.close();
  }
}

describe("errors: unexpected exceptions", () => {
  test("a failing database answers 500 without internals and logs the request id", async () => {
    const { app, lines } = loggedApp(h);
    // A column, not the table: a service table gone on PostgreSQL is 503 (the database recreated empty).
    await h.rt.db.run("ALTER TABLE contacts RENAME COLUMN first_name TO first_name_moved");
    try {
      const res = await app.handle(new Request("http://localhost/public/v1/contacts", { headers: { authorization: `Bearer ${h.token}`, "x-request-id": "trace-500" } }));
      const text = await res.text();
      expect(res.status).toBe(500);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(res.headers.get("x-request-id")).toBe("trace-500");
      expect(JSON.parse(text)).toEqual({
        type: "urn:crm:problem:internal",
        title: "Internal Server Error",
        status: 500,
        detail: "An unexpected error occurred. Quote request id trace-500 when reporting it.",
      });
      expect(text).not.toMatch(/sqlite|postgres|first_name_moved|no such column|does not exist|stack/i);
      const error = lines.find((l) => l.level === "error");
      expect(error).toMatchObject({ msg: "unhandled error", request_id: "trace-500", method: "GET", path: "/public/v1/contacts" });
      expect(error!.error).toMatch(h.rt.db.dialect === "sqlite" ? /no such column: c\.first_name/ : /column c\.first_name does not exist/);
      await Bun.sleep(5); // the request line is written after the response is handed back
      expect(lines.find((l) => l.msg === "request")).toMatchObject({ request_id: "trace-500", status: 500 });
    } finally {
      await h.rt.db.run("ALTER TABLE contacts RENAME COLUMN first_name_moved TO first_name");
    }
  });

  sqliteOnly("a full disk is 503 storage-full with Retry-After, changes nothing and is logged; with room again the same write succeeds", async () => {
    const { app, lines } = loggedApp(h);
    const writer = h.db.sqlite;
    const { page_count } = writer.query<{ page_count: number }, []>("PRAGMA page_count").get()!;
    const before = await contactCount(h);
    // max_page_count stands in for the disk: SQLite answers SQLITE_FULL exactly as on a full one.
    writer.run(`PRAGMA max_page_count = ${page_count}`);
    const post = () =>
      app.handle(new Request("http://localhost/public/v1/contacts", { method: "POST", headers: { authorization: `Bearer ${h.token}`, "content-type": "application/json" }, body: JSON.stringify({ first_name: "F", custom_fields: { pad: "x".repeat(12_000) } }) }));
    try {
      const res = await post();
      expect({ status: res.status, retryAfter: res.headers.get("retry-after"), body: await res.json() }).toEqual({
        status: 503,
        retryAfter: "60",
        body: { type: "urn:crm:problem:storage-full", title: "Service Unavailable", status: 503, detail: "The service's database has no room for this change (its disk is full), so nothing was changed. Retry later, once the operator has made room." },
      });
      expect(lines.find((l) => l.level === "error")).toMatchObject({ msg: "database full: a change was refused", method: "POST", path: "/public/v1/contacts", error: expect.stringContaining("database or disk is full") });
      // Every change meets a full disk: one line says it, then one a minute with the count, not a line per request.
      expect((await post()).status).toBe(503);
      expect(lines.filter((l) => l.level === "error").map((l) => l.msg)).toEqual(["database full: a change was refused"]);
      expect(await contactCount(h)).toBe(before);
    } finally {
      writer.run("PRAGMA max_page_count = 4294967294");
    }
    expect((await post()).status).toBe(201);
  });

  sqliteOnly("/readyz fails storage-full while the last write was refused for a full disk, though its own small write fits; a write that succeeds makes it ready", async () => {
    const { app } = loggedApp(h);
    const writer = h.db.sqlite;
    const { page_count } = writer.query<{ page_count: number }, []>("PRAGMA page_count").get()!;
    const post = (pad: number) =>
      app.handle(new Request("http://localhost/public/v1/contacts", { method: "POST", headers: { authorization: `Bearer ${h.token}`, "content-type": "application/json" }, body: JSON.stringify({ first_name: "F", custom_fields: { pad: "x".repeat(pad) } }) }));
    // The harness runs no delivery loop, so /readyz is 503 for that check whatever the database's.
    const databaseReadiness = async () => (await (await app.handle(new Request("http://localhost/readyz"))).json()).checks.database;
    // max_page_count stands in for the disk: SQLite answers SQLITE_FULL exactly as on a full one.
    writer.run(`PRAGMA max_page_count = ${page_count}`);
    try {
      expect(await databaseReadiness()).toBe("ok");
      expect((await post(12_000)).status).toBe(503);
      expect([await databaseReadiness(), await databaseReadiness()]).toEqual(["storage-full", "storage-full"]);
    } finally {
      writer.run("PRAGMA max_page_count = 4294967294");
    }
    expect((await post(12_000)).status).toBe(201);
    expect(await databaseReadiness()).toBe("ok");
  });

  sqliteOnly("a write the database's storage refuses (its file or file system read-only) is 503 storage-read-only with Retry-After, changes nothing and is logged; /readyz says so; writable again, the same write succeeds and /readyz is ready", async () => {
    const { app, lines } = loggedApp(h);
    const before = await contactCount(h);
    const post = () =>
      app.handle(new Request("http://localhost/public/v1/contacts", { method: "POST", headers: { authorization: `Bearer ${h.token}`, "content-type": "application/json" }, body: JSON.stringify({ first_name: "Stored" }) }));
    // The harness runs no delivery loop, so /readyz is 503 for that check whatever the database's.
    const databaseReadiness = async () => (await (await app.handle(new Request("http://localhost/readyz"))).json()).checks.database;
    // query_only stands in for the read-only file: SQLite refuses the write with SQLITE_READONLY, as on one.
    h.db.sqlite.run("PRAGMA query_only = ON");
    try {
      const res = await post();
      expect({ status: res.status, retryAfter: res.headers.get("retry-after"), body: await res.json() }).toEqual({
        status: 503,
        retryAfter: "60",
        body: {
          type: "urn:crm:problem:storage-read-only",
          title: "Service Unavailable",
          status: 503,
          detail: "The service's database cannot write to its storage (its file or file system is read-only, or refused the write), so nothing was changed. Retry later, once the operator has made it writable.",
        },
      });
      expect(lines.find((l) => l.level === "error")).toMatchObject({ msg: "database storage read-only: a change was refused", method: "POST", path: "/public/v1/contacts", error: expect.stringContaining("attempt to write a readonly database") });
      expect((await post()).status).toBe(503);
      expect(lines.filter((l) => l.level === "error").map((l) => l.msg)).toEqual(["database storage read-only: a change was refused"]);
      expect(await databaseReadiness()).toBe("storage-read-only");
      expect(await contactCount(h)).toBe(before);
    } finally {
      h.db.sqlite.run("PRAGMA query_only = OFF");
    }
    expect((await post()).status).toBe(201);
    expect(await databaseReadiness()).toBe("ok");
  });

  sqliteOnly("a commit whose sync to disk fails (SQLITE_IOERR_FSYNC) is 503 storage-failed, saying the change may not have been saved, and is logged with the code; /readyz fails from then on, until a restart, though later writes succeed", async () => {
    // bun:sqlite's error for a failed fsync: the SQLiteError of an extended code (it cannot be constructed outside bun:sqlite).
    const fsyncFailed = () => Object.assign(new Error("disk I/O error"), { name: "SQLiteError", code: "SQLITE_IOERR_FSYNC", errno: 1034 });
    expect([fsyncFailed(), { code: "SQLITE_IOERR_DIR_FSYNC", errno: 1290 }].map(databaseFailureOf)).toEqual(["storage-failed", "storage-failed"]);
    // On a harness of its own: the failure keeps its /readyz failing, as it does the service's until a restart.
    const failing = await createHarness({ metricsToken: "metrics-token-for-tests-0001" });
    try {
      const { app, lines } = loggedApp(failing);
      const post = (first_name: string) =>
        app.handle(new Request("http://localhost/public/v1/contacts", { method: "POST", headers: { authorization: `Bearer ${failing.token}`, "content-type": "application/json" }, body: JSON.stringify({ first_name }) }));
      // With the metrics token, /readyz gives the reason beside the check's code.
      const databaseReadiness = async () => {
        const { checks, reasons } = await (await app.handle(new Request("http://localhost/readyz", { headers: { authorization: "Bearer metrics-token-for-tests-0001" } }))).json();
        return { check: checks.database, reason: reasons.database };
      };
      // No storage here fails a sync on demand (SQLite opens its WAL with O_NOFOLLOW, bun:sqlite takes no VFS, and a
      // broken disk needs root): the COMMIT of the group holding the contact fails with the error bun:sqlite gives for a
      // failed fsync (the token's bookkeeping commits in a group of its own before it).
      const writer = failing.db.sqlite;
      const query = writer.query.bind(writer);
      let contactWritten = false;
      writer.query = ((sql: string) => {
        if (sql.startsWith("INSERT INTO contacts ")) contactWritten = true;
        if (sql !== "COMMIT" || !contactWritten) return query(sql);
        contactWritten = false;
        writer.query = query;
        return {
          run() {
            throw fsyncFailed();
          },
        };
      }) as typeof writer.query;
      const before = await contactCount(failing);
      const res = await post("Unsynced");
      expect({ status: res.status, retryAfter: res.headers.get("retry-after"), body: await res.json() }).toEqual({
        status: 503,
        retryAfter: "60",
        body: {
          type: "urn:crm:problem:storage-failed",
          title: "Service Unavailable",
          status: 503,
          detail: "The service's database storage failed while saving this change (a disk I/O error), so it may not have been saved. Retry it; a change retried with the same Idempotency-Key is made once.",
        },
      });
      expect(lines.find((l) => l.level === "error")).toMatchObject({ msg: "database storage failed: a change may not have been saved, and /readyz fails until the service is restarted", code: "SQLITE_IOERR_FSYNC", method: "POST", path: "/public/v1/contacts", error: expect.stringContaining("disk I/O error") });
      expect(await contactCount(failing)).toBe(before);
      expect((await post("Synced")).status).toBe(201);
      expect(await databaseReadiness()).toEqual({
        check: "storage-fault",
        reason: "the database's storage failed a sync to disk (SQLITE_IOERR_FSYNC): the disk may be failing, and a change refused then may still reach it; check the disk and its kernel log, then restart the service",
      });
    } finally {
      await failing.close();
    }
  });

  sqliteOnly("a database another process holds locked past the busy timeout is 503 database-unavailable with Retry-After; reads go on, and the write succeeds once the lock is let go", async () => {
    const { app, lines } = loggedApp(h);
    const before = await contactCount(h);
    // Another process (a `crm` command, a backup tool) holding the write lock, for longer than the writer waits.
    const other = new Database(databasePath(h.dataDir));
    other.run("BEGIN IMMEDIATE");
    h.db.lockWaitMs = 50;
    const post = () =>
      app.handle(new Request("http://localhost/public/v1/contacts", { method: "POST", headers: { authorization: `Bearer ${h.token}`, "content-type": "application/json" }, body: JSON.stringify({ first_name: "Locked" }) }));
    try {
      const res = await post();
      expect({ status: res.status, retryAfter: res.headers.get("retry-after"), body: await res.json() }).toEqual({
        status: 503,
        retryAfter: "5",
        body: {
          type: "urn:crm:problem:database-unavailable",
          title: "Service Unavailable",
          status: 503,
          detail: "The service cannot use its database just now (it is unreachable, restarting or busy). Retry shortly; a change retried with the same Idempotency-Key is made once, even if this attempt went through.",
        },
      });
      expect(lines.find((l) => l.level === "error")).toMatchObject({ msg: "database unavailable: a request was refused", method: "POST", path: "/public/v1/contacts", error: expect.stringContaining("database is locked") });
      expect((await post()).status).toBe(503);
      expect(lines.filter((l) => l.level === "error").map((l) => l.msg)).toEqual(["database unavailable: a request was refused"]);
      expect((await h.request("GET", "/public/v1/contacts")).status).toBe(200);
    } finally {
      other.run("ROLLBACK");
      other.close();
      h.db.lockWaitMs = 5_000;
    }
    expect(await contactCount(h)).toBe(before);
    expect((await post()).status).toBe(201);
  });

  sqliteOnly("a write waiting for a lock another process holds does not hold up the other requests: reads and health checks are answered meanwhile, and the write is made once the lock is let go", async () => {
    const other = new Database(databasePath(h.dataDir));
    other.run("BEGIN IMMEDIATE");
    // Long enough that a slow machine never turns the wait into a 503.
    h.db.lockWaitMs = 60_000;
    let settled = false;
    const created = h.json("POST", "/public/v1/contacts", { body: { first_name: "Waited" } }).finally(() => (settled = true));
    try {
      // The write's group is under way (waiting for the lock) before the reads are sent.
      await Bun.sleep(100);
      const [list, health] = [await h.request("GET", "/public/v1/contacts"), await h.request("GET", "/healthz")];
      expect([list.status, health.status, settled]).toEqual([200, 200, false]);
    } finally {
      other.run("ROLLBACK");
      other.close();
      h.db.lockWaitMs = 5_000;
    }
    const { status, body } = await created;
    expect([status, (await h.json("GET", `/public/v1/contacts/${body.data.id}`)).body.data.first_name]).toEqual([201, "Waited"]);
  });

  test("a token and a console session whose bookkeeping is due are answered while another connection holds what it would write: the uses that could not be recorded are logged at warn", async () => {
    const { app, lines } = loggedApp(h);
    // Never used: its first use is due to be recorded.
    const { token, info } = await createApiToken(h.rt.db, "read while held");
    const secret = "a-console-session-whose-visit-is-held";
    const seen = Date.now() - 120_000;
    await h.rt.db.write(async (tx) => {
      await tx.run("INSERT INTO operators (id, email, password_hash, created_at, updated_at) VALUES (?, ?, ?, ?, ?)", ["op_visit_held", "visit-held@example.com", "unused", seen, seen]);
      await tx.run("INSERT INTO operator_sessions (id_hash, operator_id, created_at, last_seen_at) VALUES (?, ?, ?, ?)", [sha256(secret), "op_visit_held", seen, seen]);
    });
    const answers = await holdingTheBookkeeping(info.id, "op_visit_held", async () => {
      const api = app.handle(new Request("http://localhost/public/v1/contacts?per_page=1", { headers: { authorization: `Bearer ${token}` } }));
      const console = app.handle(new Request("http://localhost/console/api/deliveries", { headers: { cookie: `${SESSION_COOKIE}=${secret}` } }));
      // A bound for a hung test, not a measurement: the lock is let go only after it.
      return { whileHeld: await settlesWithin(Promise.all([api, console]), 10_000), api, console };
    });
    expect({ whileHeld: answers.whileHeld, api: (await answers.api).status, console: (await answers.console).status }).toEqual({ whileHeld: true, api: 200, console: 200 });
    const notRecorded = expect.stringContaining(h.rt.db.dialect === "sqlite" ? "database is locked" : "locked by another session");
    expect(lines.filter((l) => l.level === "warn").toSorted((a, b) => a.msg.localeCompare(b.msg))).toEqual([
      { time: expect.any(String), level: "warn", msg: "a console session's visit could not be recorded; the request goes on", error: notRecorded },
      { time: expect.any(String), level: "warn", msg: "a token's last use could not be recorded; the request goes on", error: notRecorded },
    ]);
  });

  sqliteOnly("bookkeeping given up while another process holds the write lock leaves nothing to commit: the database closes at once, not once the lock is let go", async () => {
    const { token, info } = await createApiToken(h.rt.db, "refused bookkeeping alone");
    // A database of its own on the same file, so that closing it leaves the harness's open.
    const db = openDatabase(databasePath(h.dataDir));
    const unrecorded: unknown[] = [];
    try {
      const answers = await holdingTheBookkeeping(info.id, "op_unused", async () => {
        db.lockWaitMs = 60_000;
        const checked = await authenticateBearer(db, token, (error) => unrecorded.push(error));
        // A bound for a hung test, not a measurement: the lock is let go only after it.
        return { checked, unrecorded: unrecorded.map(String), closedWhileHeld: await settlesWithin(db.close(), 10_000) };
      });
      expect(answers).toEqual({ checked: { id: info.id, name: "refused bookkeeping alone" }, unrecorded: [expect.stringContaining("database is locked")], closedWhileHeld: true });
    } finally {
      await db.close();
    }
  });

  test("a response that breaks its own schema is the server's fault: 500, logged, not a 422 blaming the client", async () => {
    const { app, lines } = loggedApp(h);
    app.get("/public/v1/test-only-bad-response", () => ({ count: "whsec_not-for-logs" }) as unknown as { count: number }, { response: { 200: t.Object({ count: t.Integer() }) } });
    const res = await app.handle(new Request("http://localhost/public/v1/test-only-bad-response", { headers: { authorization: `Bearer ${h.token}` } }));
    const body = (await res.json()) as any;
    expect(res.status).toBe(500);
    expect(body).toEqual({ type: "urn:crm:problem:internal", title: "Internal Server Error", status: 500, detail: `An unexpected error occurred. Quote request id ${res.headers.get("x-request-id")} when reporting it.` });
    expect(lines.find((l) => l.level === "error")).toMatchObject({ request_id: res.headers.get("x-request-id"), error: "the response does not match its schema at /count" });
    expect(JSON.stringify(lines)).not.toContain("whsec_not-for-logs");
  });

  test("an exception thrown by a handler answers 500 without its message", async () => {
    const { app, lines } = loggedApp(h);
    app.get("/public/v1/test-only-boom", () => {
      throw new Error("secret internal detail");
    });
    // Added after the app is built, it still runs under the app-wide error handler.
    const res = await app.handle(new Request("http://localhost/public/v1/test-only-boom", { headers: { authorization: `Bearer ${h.token}` } }));
    const body = (await res.json()) as any;
    expect(res.status).toBe(500);
    expect(body.type).toBe("urn:crm:problem:internal");
    expect(body.status).toBe(500);
    expect(JSON.stringify(body)).not.toContain("secret internal detail");
    expect(lines.find((l) => l.level === "error")).toMatchObject({ request_id: res.headers.get("x-request-id"), error: "Error: secret internal detail" });
  });
});

describe("errors: field details in plain words", () => {
  test("a schema without an error text of its own still words each refusal of a string, list or object as a person would, with the schema's limits", () => {
    const check = schemaChecker(
      t.Object({
        name: t.String({ minLength: 1, maxLength: 5 }),
        code: t.String({ minLength: 3 }),
        tags: t.Array(t.String(), { minItems: 1, maxItems: 2 }),
        pair: t.Optional(t.Array(t.String(), { minItems: 2 })),
        meta: t.Object({}),
      }),
    );
    const errors = (value: object) => check({ name: "a", code: "abc", tags: ["x"], meta: {}, ...value });
    expect([errors({ name: "", tags: [], pair: ["x"] }), errors({ name: "abcdef", code: "ab", tags: ["x", "y", "z"] }), errors({ name: 5, tags: "x", meta: [] }), check({ tags: [], meta: {} })]).toEqual([
      [
        { pointer: "/name", detail: "must not be empty" },
        { pointer: "/tags", detail: "must not be empty" },
        { pointer: "/pair", detail: "must have at least 2 items" },
      ],
      [
        { pointer: "/name", detail: "must be at most 5 characters" },
        { pointer: "/code", detail: "must be at least 3 characters" },
        { pointer: "/tags", detail: "must have at most 2 items" },
      ],
      [
        { pointer: "/name", detail: "must be a string" },
        { pointer: "/tags", detail: "must be a list" },
        { pointer: "/meta", detail: "must be an object" },
      ],
      [
        { pointer: "/name", detail: "is required" },
        { pointer: "/code", detail: "is required" },
        { pointer: "/tags", detail: "must not be empty" },
      ],
    ]);
  });
});

describe("errors: a bad element of a list is pointed at", () => {
  const TAG = 'must be a tag of 1 to 100 characters, not "." or ".."';
  const TAGS = 'must be a list of at most 100 distinct tags of 1 to 100 characters each, none of them "." or ".."';
  const ACCOUNT_IDS = "must be a list of at most 100 distinct account ids (acc_...)";
  const ACC = "acc_01J00000000000000000000000";

  test("a contact's create, PATCH and batch name each bad tag, account id or user id by its index (RFC 6901), and a repeat at the repeat; a list wrong as a whole (not a list, too long) is named as one", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Eve", tags: ["ok", "", "..", 5, "t".repeat(101)], account_ids: [ACC, "acc_nope"] } });
    const patched = await h.json("PATCH", `/public/v1/contacts/${contactId}`, { body: { tags: ["a", "b", "a"], assigned_user_ids: [7] } });
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: [{ first_name: "Ann", tags: ["ok"] }, { first_name: "Bob", account_ids: ["x", ACC, ACC] }] } });
    const tooMany = [...Array.from({ length: 100 }, (_, i) => `acc_${String(i).padStart(26, "0")}`), "x"];
    const wholeList = await h.json("PATCH", `/public/v1/contacts/${contactId}`, { body: { tags: "vip", account_ids: tooMany } });
    expect([created.body, patched.body, batch.body.data[1], wholeList.body]).toEqual([
      validation([
        { pointer: "/tags/1", detail: TAG },
        { pointer: "/tags/2", detail: TAG },
        { pointer: "/tags/3", detail: TAG },
        { pointer: "/tags/4", detail: TAG },
        { pointer: "/account_ids/1", detail: "must be an account id (acc_...)" },
      ]),
      validation([
        { pointer: "/tags/2", detail: "repeats item 0" },
        { pointer: "/assigned_user_ids/0", detail: "must be a user id (usr_...)" },
      ]),
      {
        status: "invalid",
        errors: [
          { pointer: "/items/1/account_ids/0", detail: "must be an account id (acc_...)" },
          { pointer: "/items/1/account_ids/2", detail: "repeats item 1" },
        ],
      },
      validation([
        { pointer: "/tags", detail: TAGS },
        { pointer: "/account_ids", detail: ACCOUNT_IDS },
      ]),
    ]);
  });
});
