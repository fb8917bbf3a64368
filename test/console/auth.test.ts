import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Database } from "../../server/db/sql.ts";
import {
  emailSubject,
  FREE_PAIR_FAILURES,
  SESSION_IDLE_MS,
  SESSION_MAX_MS,
  SETUP_CODE_TTL_MS,
  inviteOperator,
  issueSetupCode,
  PACED_AFTER,
  pairDelayMs,
  passwordResetLink,
  removeOperator,
  resetOperatorPassword,
  signIn,
  unlockOperator,
} from "../../server/operators/service.ts";
import { DEVICE_FAILURES, DEVICE_TTL_MS, newDeviceCookie } from "../../server/operators/devices.ts";
import type { ProblemError } from "../../server/shared/problem.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { afterBlockingCommand, createHarness, type Harness } from "../support/harness.ts";
import { runCli, SOURCE } from "../ops/support.ts";
import { databaseArgs, postgresOnly } from "../support/backend.ts";
import { addOperator, ConsoleClient, OPERATOR, startConsoleServer, type ConsoleServer } from "./support.ts";

let harness: Harness | undefined;
afterEach(() => {
  harness?.close();
  harness = undefined;
});

async function setup() {
  harness = await createHarness();
  return { h: harness, client: new ConsoleClient((r) => harness!.app.handle(r)) };
}

/** signedIn returns a client of the harness's console that has signed in as the test operator. */
async function signedIn(h: Harness): Promise<ConsoleClient> {
  const client = new ConsoleClient((r) => h.app.handle(r));
  expect((await client.signIn()).status).toBe(303);
  return client;
}

const sha256 = (text: string) => new Bun.CryptoHasher("sha256").update(text).digest();
const operatorCount = async (h: Harness) => (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM operators"))!.n;
const sessionRows = async (h: Harness) => (await h.rt.db.all<{ id_hash: Uint8Array; last_seen_at: number }>("SELECT id_hash, last_seen_at FROM operator_sessions"));

describe("first operator: setup link and command line", () => {
  test("serve logs a one-time setup link while no operator exists, and none once one does", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "crm-console-"));
    const config = { ...DEFAULT_CONFIG, host: "127.0.0.1", port: 0, dataDir };
    const lines: Record<string, unknown>[] = [];
    const log = createLogger("info", (line) => lines.push(JSON.parse(line)));
    const first = await startServer(config, log);
    expect(first.setupUrl).toMatch(new RegExp(`^${first.url}/console/setup\\?code=[A-Za-z0-9_-]{43}$`));
    expect(lines.filter((l) => l.setup_url).map((l) => l.setup_url)).toEqual([first.setupUrl]);
    await addOperator(first.runtime.db);
    await first.stop();
    lines.length = 0;
    const second = await startServer(config, log);
    expect(second.setupUrl).toBeNull();
    expect(lines.filter((l) => l.setup_url)).toEqual([]);
    await second.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test("the setup link opens a form that creates the first operator (argon2id) and signs in, trusting the browser with a device cookie", async () => {
    const { h, client } = await setup();
    const code = await issueSetupCode(h.rt.db);
    const page = await client.get(`/console/setup?code=${code}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain("Create the first operator");
    const done = await client.post("/console/setup", { code, email: " First@Example.com ", password: "a long enough secret", password_again: "a long enough secret" });
    expect(done.status).toBe(303);
    expect(done.headers.get("location")).toBe("/console/");
    const home = await client.get("/console/");
    expect(home.status).toBe(200);
    expect(home.text).toContain("first@example.com");
    const row = (await h.rt.db.get<{ id: string; email: string; password_hash: string }>("SELECT id, email, password_hash FROM operators"))!;
    expect(row.email).toBe("first@example.com");
    expect(client.cookies.get("crm_console_device")?.split(".")[0]).toBe(row.id);
    expect(row.password_hash).toStartWith("$argon2id$");
    expect(await Bun.password.verify("a long enough secret", row.password_hash)).toBe(true);
  });

  test("a setup link works once, expires after 30 minutes, and a newer link (another instance's start) leaves it working until an operator is created", async () => {
    const { h, client } = await setup();
    const expired = await issueSetupCode(h.rt.db, Date.now() - SETUP_CODE_TTL_MS - 1);
    expect((await client.get(`/console/setup?code=${expired}`)).status).toBe(403);
    const older = await issueSetupCode(h.rt.db);
    const newer = await issueSetupCode(h.rt.db);
    expect((await client.get(`/console/setup?code=${older}`)).status).toBe(200);
    await client.get(`/console/setup?code=${newer}`);
    expect((await client.post("/console/setup", { code: newer, email: "a@example.com", password: "0123456789", password_again: "0123456789" })).status).toBe(303);
    const reuse = new ConsoleClient((r) => h.app.handle(r));
    expect((await reuse.get(`/console/setup?code=${newer}`)).status).toBe(403);
    expect((await reuse.post("/console/setup", { code: newer, email: "b@example.com", password: "0123456789", password_again: "0123456789" })).status).toBe(403);
    // The first operator uses up every setup link.
    const refused = await reuse.get(`/console/setup?code=${older}`);
    expect([refused.status, refused.text.includes("invalid, expired or already used")]).toEqual([403, true]);
    expect(await operatorCount(h)).toBe(1);
  });

  test("setup refuses a bad email, a short password or two different passwords, and creates nothing", async () => {
    const { h, client } = await setup();
    const code = await issueSetupCode(h.rt.db);
    await client.get(`/console/setup?code=${code}`);
    const cases: [Record<string, string>, string][] = [
      [{ email: "not-an-email", password: "0123456789", password_again: "0123456789" }, "email must be an email address"],
      [{ email: "a@example.com", password: "short", password_again: "short" }, "password must be 10 to 512 characters"],
      [{ email: "a@example.com", password: "0123456789", password_again: "9876543210" }, "password again must repeat the password."],
    ];
    for (const [fields, message] of cases) {
      const res = await client.post("/console/setup", { code, ...fields });
      expect(res.status).toBe(422);
      expect(res.text).toContain(message);
    }
    expect(await operatorCount(h)).toBe(0);
  });

  test("`operator create --email E --password-stdin` adds an operator who can sign in", async () => {
    const { h, client } = await setup();
    const run = (args: string[], stdin: string) => {
      const child = Bun.spawnSync([process.execPath, join(import.meta.dir, "../../server/main.ts"), "operator", "create", ...args, ...databaseArgs(h.rt.config)], { stdin: Buffer.from(stdin) });
      return { code: child.exitCode, out: child.stdout.toString(), err: child.stderr.toString() };
    };
    const created = run(["--email", "cli@example.com", "--password-stdin"], "from the command line\n");
    expect(created.err).toBe("");
    expect(created.code).toBe(0);
    expect(created.out).toMatch(/^created operator opr_[0-9A-Z]{26} \(cli@example\.com\); sign in at \/console\/login\n$/);
    expect((await client.signIn({ email: "cli@example.com", password: "from the command line" })).status).toBe(303);
    expect(run(["--email", "cli@example.com", "--password-stdin"], "another long password\n")).toEqual({ code: 2, out: "", err: "crm: An operator with email cli@example.com already exists.\n" });
    expect(run(["--email", "x@example.com", "--password-stdin"], "short\n")).toEqual({ code: 2, out: "", err: "crm: password must be 10 to 512 characters.\n" });
    expect(run(["--email", "x@example.com"], "")).toEqual({ code: 2, out: "", err: "crm: operator create needs --email E and --password-stdin (the password is read from standard input)\n" });
  });
});

describe("sign-in and sessions", () => {
  test("signing in sets an HttpOnly, SameSite=Strict session cookie for /console, and a device cookie for 30 days naming the operator by id, Secure only over https", async () => {
    const { h } = await setup();
    const operator = await addOperator(h.rt.db);
    for (const [base, secure] of [["http://localhost", false], ["https://localhost", true]] as const) {
      const client = new ConsoleClient((r) => h.app.handle(r), base);
      const res = await client.signIn();
      expect(res.status).toBe(303);
      const cookies = res.headers.getSetCookie();
      const value = client.cookies.get("crm_console_session")!;
      expect(value).toMatch(/^[A-Za-z0-9_-]{43}$/);
      // operator id, random nonce, expiry (ms), HMAC-SHA256 signature: neither the email nor anything of the password
      const device = client.cookies.get("crm_console_device")!;
      expect(device).toMatch(new RegExp(`^${operator.id}\\.[A-Za-z0-9_-]{43}\\.\\d{13}\\.[A-Za-z0-9_-]{43}$`));
      expect(cookies).toEqual([
        `crm_console_session=${value}; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}`,
        `crm_console_csrf=; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}; Max-Age=0`,
        `crm_console_device=${device}; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}; Max-Age=${DEVICE_TTL_MS / 1000}`,
      ]);
    }
  });

  test("behind a trusted proxy that terminates TLS, X-Forwarded-Proto: https makes the cookies Secure", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "crm-console-proxy-"));
    // The test connects from 127.0.0.1: the first server trusts that peer as its proxy, the second does not.
    const trusting = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error", trustedProxies: ["127.0.0.1"] }, createLogger("error", () => {}));
    const signInCookies = async (url: string, proto: string | null) => {
      const client = new ConsoleClient((r) => {
        if (proto !== null) r.headers.set("x-forwarded-proto", proto);
        return fetch(r, { redirect: "manual" });
      }, url);
      const res = await client.signIn();
      expect(res.status).toBe(303);
      return res.headers.getSetCookie().map((c) => c.replace(/^(crm_console_session|crm_console_device)=[^;]+/, "$1=…"));
    };
    const cookies = (secure: boolean) => [
      `crm_console_session=…; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}`,
      `crm_console_csrf=; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}; Max-Age=0`,
      `crm_console_device=…; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}; Max-Age=${DEVICE_TTL_MS / 1000}`,
    ];
    try {
      await addOperator(trusting.runtime.db);
      expect(await signInCookies(trusting.url, "https")).toEqual(cookies(true));
      expect(await signInCookies(trusting.url, "http")).toEqual(cookies(false));
      expect(await signInCookies(trusting.url, null)).toEqual(cookies(false));
    } finally {
      await trusting.stop();
    }
    const untrusting = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error" }, createLogger("error", () => {}));
    try {
      expect(await signInCookies(untrusting.url, "https")).toEqual(cookies(false));
    } finally {
      await untrusting.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("session ids are random and only their SHA-256 is stored", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const [a, b] = [await signedIn(h), await signedIn(h)];
    const ids = [a.cookies.get("crm_console_session")!, b.cookies.get("crm_console_session")!];
    expect(ids[0]).not.toBe(ids[1]);
    const stored = (await sessionRows(h)).map((r) => Buffer.from(r.id_hash).toString("hex")).sort();
    expect(stored).toEqual(ids.map((id) => Buffer.from(sha256(id)).toString("hex")).sort());
  });

  test("a wrong password or unknown email is refused with 401 and no session", async () => {
    const { h, client } = await setup();
    await addOperator(h.rt.db);
    for (const attempt of [{ email: OPERATOR.email, password: "wrong password!" }, { email: "nobody@example.com", password: OPERATOR.password }]) {
      await client.get("/console/login");
      const res = await client.post("/console/login", attempt);
      expect(res.status).toBe(401);
      expect(res.text).toContain("The email or password is wrong.");
      expect(client.cookies.has("crm_console_session")).toBe(false);
    }
    expect(await sessionRows(h)).toEqual([]);
    expect((await client.get("/console/")).status).toBe(303);
  });

  test("logout ends the session: the old cookie no longer opens pages", async () => {
    const { h, client } = await setup();
    await addOperator(h.rt.db);
    await client.signIn();
    const cookie = `crm_console_session=${client.cookies.get("crm_console_session")}`;
    await client.get("/console/");
    const out = await client.post("/console/logout", {});
    expect(out.status).toBe(303);
    expect(out.headers.get("location")).toBe("/console/login");
    expect(out.headers.getSetCookie()).toEqual(["crm_console_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"]);
    expect(await sessionRows(h)).toEqual([]);
    const replay = await h.app.handle(new Request("http://localhost/console/", { headers: { cookie } }));
    expect(replay.status).toBe(303);
    expect(replay.headers.get("location")).toBe("/console/login?next=%2Fconsole%2F");
  });

  test("signing out after the session ended elsewhere lands on the sign-in page, not on a 'Form expired' page", async () => {
    const { h, client } = await setup();
    await addOperator(h.rt.db);
    await client.signIn();
    await client.get("/console/");
    await h.rt.db.run("DELETE FROM operator_sessions");
    const out = await client.post("/console/logout", {});
    expect([out.status, out.headers.get("location"), out.headers.getSetCookie()]).toEqual([303, "/console/login", ["crm_console_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"]]);
    // Any other form of that page sends the browser to sign in, and changes nothing.
    await client.signIn();
    await client.get("/console/tokens");
    await h.rt.db.run("DELETE FROM operator_sessions");
    const token = await client.post("/console/tokens", { name: "after the end" });
    expect([token.status, token.headers.get("location"), (await h.rt.db.all("SELECT id FROM api_tokens WHERE name = 'after the end'")).length]).toEqual([303, "/console/login", 0]);
  });

  test("a sign-out another site posts (no CSRF token, and no SameSite=Strict cookie) changes nothing: the operator stays signed in; one from a tab signed out elsewhere still lands on the sign-in page", async () => {
    const server = await startConsoleServer();
    try {
      await addOperator(server.runtime.db);
      const operator = new ConsoleClient((r) => fetch(r, { redirect: "manual" }), server.url);
      await operator.signIn();
      await operator.get("/console/");
      const crossSite = await fetch(`${server.url}/console/logout`, {
        method: "POST",
        redirect: "manual",
        headers: { origin: "https://evil.example", "sec-fetch-site": "cross-site", "content-type": "application/x-www-form-urlencoded" },
        body: "",
      });
      expect([crossSite.status, crossSite.headers.get("location"), crossSite.headers.getSetCookie()]).toEqual([303, "/console/login", []]);
      // With the session's cookie but without its token: refused, and nothing cleared.
      const tokenless = await operator.post("/console/logout", { _csrf: null });
      expect([tokenless.status, tokenless.headers.getSetCookie()]).toEqual([403, []]);
      expect([(await operator.get("/console/")).status, (await server.runtime.db.all("SELECT operator_id FROM operator_sessions")).length]).toEqual([200, 1]);
      // Signed out in one tab (the cookie is gone), then Sign out in another, with its page's old token.
      expect((await operator.post("/console/logout", {})).status).toBe(303);
      const again = await operator.post("/console/logout", {});
      expect([again.status, again.headers.get("location"), again.headers.getSetCookie()]).toEqual([303, "/console/login", []]);
    } finally {
      await server.close();
    }
  });

  test("a session idle for 12 hours ends; using a session keeps it alive", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const [idle, busy] = [await signedIn(h), await signedIn(h)];
    const hashOf = (c: ConsoleClient) => sha256(c.cookies.get("crm_console_session")!);
    const now = Date.now();
    await h.rt.db.run("UPDATE operator_sessions SET last_seen_at = ? WHERE id_hash = ?", [now - SESSION_IDLE_MS - 1, hashOf(idle)]);
    await h.rt.db.run("UPDATE operator_sessions SET last_seen_at = ? WHERE id_hash = ?", [now - SESSION_IDLE_MS + 60_000, hashOf(busy)]);
    const expired = await idle.get("/console/tokens");
    expect(expired.status).toBe(303);
    expect(expired.headers.get("location")).toBe("/console/login?next=%2Fconsole%2Ftokens");
    expect((await busy.get("/console/tokens")).status).toBe(200);
    const seen = (await h.rt.db.get<{ last_seen_at: number }>("SELECT last_seen_at FROM operator_sessions WHERE id_hash = ?", [hashOf(busy)]))!;
    expect(seen.last_seen_at).toBeGreaterThanOrEqual(now);
  });

  test("a session ends 24 hours after sign-in even while it is used, and the next sign-in clears it away", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const [old, young] = [await signedIn(h), await signedIn(h)];
    const hashOf = (c: ConsoleClient) => sha256(c.cookies.get("crm_console_session")!);
    const now = Date.now();
    await h.rt.db.run("UPDATE operator_sessions SET created_at = ? WHERE id_hash = ?", [now - SESSION_MAX_MS - 1, hashOf(old)]);
    await h.rt.db.run("UPDATE operator_sessions SET created_at = ? WHERE id_hash = ?", [now - SESSION_MAX_MS + 60_000, hashOf(young)]);
    const ended = await old.get("/console/tokens");
    expect([ended.status, ended.headers.get("location")]).toEqual([303, "/console/login?next=%2Fconsole%2Ftokens"]);
    expect((await young.get("/console/tokens")).status).toBe(200);
    await signedIn(h);
    const left = await h.rt.db.all<{ id_hash: Uint8Array }>("SELECT id_hash FROM operator_sessions");
    expect(left.some((row) => Buffer.from(row.id_hash).equals(Buffer.from(hashOf(old))))).toBe(false);
    expect(left.length).toBe(2);
  });

  test("after sign-in the operator lands on the page they asked for, never outside the console", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const cases: [string, string][] = [
      ["/console/users?page=1", "/console/users?page=1"],
      ["https://evil.example/console/", "/console/"],
      ["//evil.example/console/", "/console/"],
      ["/console/\\evil.example", "/console/"],
      // Dot segments, which the browser resolves before it asks (percent-encoded too): where they lead is checked.
      ["/console/../docs", "/console/"],
      ["/console/%2e%2e/public/v1/contacts", "/console/"],
      ["/console/%2E%2E/%2e%2e/docs", "/console/"],
      ["/console/./contacts/../tokens?x=1", "/console/tokens?x=1"],
      // What a Location header cannot carry as it is: line breaks, control and non-ASCII characters.
      ["/console/\nevil", "/console/"],
      ["/console/\r\nSet-Cookie: x=1", "/console/"],
      ["/console/\u0001x", "/console/"],
      ["/console/é", "/console/"],
      ["/console/日本", "/console/"],
      ["/console/😀", "/console/"],
      ["/console/contacts?q=J%C3%B6rg", "/console/contacts?q=J%C3%B6rg"],
    ];
    const sessions = async () => (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM operator_sessions"))!.n;
    for (const [next, landing] of cases) {
      const client = new ConsoleClient((r) => h.app.handle(r));
      const before = await sessions();
      const shown = await client.get(`/console/login?next=${encodeURIComponent(next)}`);
      const res = await client.post("/console/login", { ...OPERATOR, next });
      expect({ next, shown: shown.status, status: res.status, location: res.headers.get("location"), sessions: (await sessions()) - before }).toEqual({ next, shown: 200, status: 303, location: landing, sessions: 1 });
      // Signed in, the sign-in page sends the operator on, by the same rule.
      const again = await client.get(`/console/login?next=${encodeURIComponent(next)}`);
      expect({ next, status: again.status, location: again.headers.get("location") }).toEqual({ next, status: 303, location: landing });
    }
  });
});

describe("sign-in racing a password reset", () => {
  test("a reset committed while the sign-in's password is checked ends that sign-in: 401, and neither a session nor a device cookie is kept", async () => {
    const { h, client } = await setup();
    await addOperator(h.rt.db);
    const verify = Bun.password.verify;
    // The reset commits after the sign-in read the operator's password hash, before its check ends.
    Bun.password.verify = async (password, hash) => {
      Bun.password.verify = verify;
      await resetOperatorPassword(h.rt.db, h.rt.secrets, OPERATOR.email, "another long enough password");
      return verify(password, hash);
    };
    try {
      const res = await client.signIn();
      const devices = (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM operator_devices"))!.n;
      expect({ status: res.status, session: client.cookies.has("crm_console_session"), sessions: (await sessionRows(h)).length, devices }).toEqual({
        status: 401,
        session: false,
        sessions: 0,
        devices: 0,
      });
    } finally {
      Bun.password.verify = verify;
    }
  });
});

describe("sign-in throttling", () => {
  let server: RunningServer | undefined;
  afterEach(async () => {
    await server?.stop();
    if (server) rmSync(server.runtime.config.dataDir, { recursive: true, force: true });
    server = undefined;
  });

  /** serveConsole starts a real server behind a trusted proxy (127.0.0.1) and returns clients that sign in from a given address. */
  async function serveConsole() {
    const dataDir = mkdtempSync(join(tmpdir(), "crm-console-throttle-"));
    server = await startServer({ ...DEFAULT_CONFIG, host: "127.0.0.1", port: 0, dataDir, trustedProxies: ["127.0.0.1"] }, createLogger("error", () => {}));
    await addOperator(server.runtime.db);
    const url = server.url;
    const from = (address: string) =>
      new ConsoleClient((request) => {
        request.headers.set("x-forwarded-for", address);
        return fetch(request, { redirect: "manual" });
      }, url);
    return { db: server.runtime.db, dataDir, from };
  }

  const wrong = async (client: ConsoleClient, email = OPERATOR.email) => {
    await client.get("/console/login");
    return client.post("/console/login", { email, password: "not the password" });
  };
  const pairRow = (db: Database, address: string) =>
    db.get<{ failures: number }>("SELECT failures FROM login_failures WHERE scope = 'pair' AND subject = ?", [`${emailSubject(server!.runtime.secrets, OPERATOR.email)} ${address}`]);
  /** passDelay moves the last failure of a pair back by its delay, as if the guesser had waited */
  const passDelay = async (db: Database, address: string) => {
    const { failures } = (await pairRow(db, address))!;
    await db.run("UPDATE login_failures SET last_failure_at = last_failure_at - ? WHERE scope = 'pair' AND subject = ?", [pairDelayMs(failures), `${emailSubject(server!.runtime.secrets, OPERATOR.email)} ${address}`]);
  };

  /** outcome names how a sign-in ended: "signed in", or its status and the Retry-After it gave. */
  const outcome = (signingIn: Promise<unknown>) =>
    signingIn.then(
      () => "signed in",
      (error: ProblemError) => `${error.status}${error.headers["retry-after"] ? ` retry-after ${error.headers["retry-after"]}` : ""}`,
    );

  test("guessing from one address is slowed by delays that double for that account and address, unchecked until each passes", async () => {
    const { db, from } = await serveConsole();
    const guesser = from("203.0.113.9");
    for (let i = 0; i < FREE_PAIR_FAILURES; i++) expect((await wrong(guesser)).status).toBe(401);
    const waits: string[] = [];
    for (let i = 0; i < 4; i++) {
      await guesser.get("/console/login");
      // The delay counts from the last failure: dated now, a loaded machine's slow sign-in and page
      // load in between cannot wear a second off the Retry-After.
      await db.run("UPDATE login_failures SET last_failure_at = ? WHERE scope = 'pair' AND subject = ?", [Date.now(), `${emailSubject(server!.runtime.secrets, OPERATOR.email)} 203.0.113.9`]);
      const early = await guesser.post("/console/login", OPERATOR); // even the right password is not checked yet
      expect(early.status).toBe(429);
      waits.push(early.headers.get("retry-after")!);
      await passDelay(db, "203.0.113.9");
      expect((await wrong(guesser)).status).toBe(401);
    }
    expect(waits).toEqual(["1", "2", "4", "8"]);
    await passDelay(db, "203.0.113.9");
    expect((await guesser.signIn()).status).toBe(303);
    expect(await pairRow(db, "203.0.113.9")).toBeNull();
  }, 20_000);

  test("an IPv6 guesser is one address for its whole /64: moving to another address of its network does not start it afresh", async () => {
    const { db, from } = await serveConsole();
    for (let i = 0; i < FREE_PAIR_FAILURES; i++) expect((await wrong(from(`2001:db8:7:8::${i + 1}`))).status).toBe(401);
    expect((await wrong(from("2001:db8:7:8:ffff::9"))).status).toBe(429);
    expect(await pairRow(db, "2001:0db8:0007:0008::/64")).toEqual({ failures: FREE_PAIR_FAILURES });
    expect((await from("2001:db8:7:9::1").signIn()).status).toBe(303); // the next /64 is someone else
  }, 20_000);

  test("guesses the trusted proxy relays naming the client only in X-Real-IP or Forwarded count for one unknown client: a sign-in from the proxy's own address is not held up by them", async () => {
    const { db } = await serveConsole();
    const relayed = (headers: Record<string, string>) =>
      new ConsoleClient((request) => {
        for (const [name, value] of Object.entries(headers)) request.headers.set(name, value);
        return fetch(request, { redirect: "manual" });
      }, server!.url);
    for (let i = 0; i < FREE_PAIR_FAILURES; i++) expect((await wrong(relayed({ "x-real-ip": `203.0.113.${i + 1}` }))).status).toBe(401);
    expect((await wrong(relayed({ forwarded: "for=198.51.100.2" }))).status).toBe(429);
    expect(await pairRow(db, "unknown")).toEqual({ failures: FREE_PAIR_FAILURES });
    expect((await relayed({}).signIn()).status).toBe(303); // a browser on the proxy's machine, not relayed
  }, 20_000);

  test("failures never lock the account: the right password from an address that has not been guessing gets in at once", async () => {
    const { from } = await serveConsole();
    // 4 addresses guess 3 times each: the account is under attack (12 failures)
    for (let a = 1; a <= 4; a++) for (let i = 0; i < FREE_PAIR_FAILURES; i++) expect((await wrong(from(`198.51.100.${a}`))).status).toBe(401);
    const operator = from("192.0.2.10");
    expect((await operator.signIn()).status).toBe(303);
    expect(operator.cookies.has("crm_console_session")).toBe(true);
  }, 20_000);

  test("failures never lock an address: after 21 wrong passwords for other accounts from one address, an operator there signs in", async () => {
    const { from } = await serveConsole();
    const shared = from("203.0.113.50"); // say, a proxy without trusted_proxies: everyone has this address
    for (let e = 0; e < 7; e++) for (let i = 0; i < FREE_PAIR_FAILURES; i++) expect((await wrong(shared, `guess${e}@example.com`)).status).toBe(401);
    expect((await from("203.0.113.50").signIn()).status).toBe(303);
  }, 30_000);

  test("while an account is under attack, checks from addresses that failed for it are paced one a second (429 past a 5 s queue); a clean address is not", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const attempt = (address: string, password = "not the password", now?: number) => outcome(signIn(h.rt.db, h.rt.secrets, { email: OPERATOR.email, password, address }, now));
    // one failure from each of 10 addresses: the account is under attack
    for (let a = 1; a <= PACED_AFTER.account; a++) expect(await attempt(`198.51.100.${a}`)).toBe("401");
    // 8 addresses that failed once each try at the same moment: six get turns 0 to 5 s apart, the rest 429
    const at = Date.now(); // one moment for all: attempts a millisecond apart, reaching the pacer out of order, could find the 6th turn 5.001 s away
    const paced = await Promise.all([...Array.from({ length: 8 }, (_, i) => attempt(`198.51.100.${i + 1}`, undefined, at)), attempt("192.0.2.10", OPERATOR.password, at)]);
    expect(paced.toSorted()).toEqual([...Array(6).fill("401"), "429 retry-after 5", "429 retry-after 5", "signed in"].toSorted());
  }, 30_000);

  test("a guesser cycling through emails from one address is paced once the address has 20 failures: one check a second, 429 past a 5 s queue; another address is checked at once", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const attempt = (email: string, address: string, password = "not the password", now?: number) => outcome(signIn(h.rt.db, h.rt.secrets, { email, password, address }, now));
    for (let e = 0; e < PACED_AFTER.address; e++) expect(await attempt(`guess${e}@example.com`, "203.0.113.7")).toBe("401");
    // 8 new emails from the same address at the same moment: six get turns 0 to 5 s apart, the rest 429 unchecked
    const at = Date.now(); // one moment for all, as above
    const paced = await Promise.all([...Array.from({ length: 8 }, (_, e) => attempt(`fresh${e}@example.com`, "203.0.113.7", undefined, at)), attempt(OPERATOR.email, "192.0.2.10", OPERATOR.password, at)]);
    expect(paced.toSorted()).toEqual([...Array(6).fill("401"), "429 retry-after 5", "429 retry-after 5", "signed in"].toSorted());
    expect(await h.rt.db.get("SELECT failures FROM login_failures WHERE scope = 'address' AND subject = '203.0.113.7'")).toEqual({ failures: PACED_AFTER.address + 6 });
  }, 30_000);

  test("an address one failure short of being paced that sends 10 sign-ins at once is paced for all but the first: one check a second, 429 past a 5 s queue", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const attempt = (email: string, now?: number) => outcome(signIn(h.rt.db, h.rt.secrets, { email, password: "not the password", address: "203.0.113.8" }, now));
    for (let e = 0; e < PACED_AFTER.address - 1; e++) expect(await attempt(`guess${e}@example.com`)).toBe("401");
    // the first is checked at once; the other nine count it, under way, as the 20th failure: six turns 0 to 5 s apart, three 429
    const at = Date.now(); // one moment for all: attempts a millisecond apart, reaching the pacer out of order, could find the 6th turn 5.001 s away
    const burst = await Promise.all(Array.from({ length: 10 }, (_, e) => attempt(`burst${e}@example.com`, at)));
    expect(burst.toSorted()).toEqual([...Array(7).fill("401"), ...Array(3).fill("429 retry-after 5")].toSorted());
  }, 30_000);

  /** withVerifySpy runs `work` while Bun.password.verify is wrapped by `wrap`, and puts it back. */
  const withVerifySpy = async <T,>(wrap: (verify: typeof Bun.password.verify) => typeof Bun.password.verify, work: () => Promise<T>): Promise<T> => {
    const verify = Bun.password.verify;
    Bun.password.verify = wrap(verify);
    try {
      return await work();
    } finally {
      Bun.password.verify = verify;
    }
  };

  test("checks from addresses that have failed run one at a time; an address that has not been guessing is checked at once beside them", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const attempt = (email: string, address: string, password = "not the password") => outcome(signIn(h.rt.db, h.rt.secrets, { email, password, address }));
    for (let a = 1; a <= 6; a++) expect(await attempt(`first${a}@example.com`, `198.51.100.${a}`)).toBe("401");
    let running = 0;
    let most = 0;
    const outcomes = await withVerifySpy(
      (verify) =>
        async (...args: Parameters<typeof verify>) => {
          if (args[0] !== "not the password") return verify.apply(Bun.password, args);
          most = Math.max(most, ++running);
          try {
            return await verify.apply(Bun.password, args);
          } finally {
            running--;
          }
        },
      () => Promise.all([...Array.from({ length: 6 }, (_, a) => attempt(`again${a}@example.com`, `198.51.100.${a + 1}`)), attempt(OPERATOR.email, "192.0.2.10", OPERATOR.password)]),
    );
    expect({ outcomes, most }).toEqual({ outcomes: [...Array(6).fill("401"), "signed in"], most: 1 });
  }, 30_000);

  test("a check from an address that has failed waits at most 5 s for the checker (429 unchecked); an address that has not been guessing signs in meanwhile", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    await signIn(h.rt.db, h.rt.secrets, { email: "typo@example.com", password: "not the password", address: "198.51.100.1" }).catch(() => {});
    const held = Promise.withResolvers<void>();
    const entered = Promise.withResolvers<void>();
    await withVerifySpy(
      (verify) =>
        async (...args: Parameters<typeof verify>) => {
          if (args[0] === "held password") {
            entered.resolve();
            await held.promise;
          }
          return verify.apply(Bun.password, args);
        },
      async () => {
        // an address that has failed holds the checker
        const holder = signIn(h.rt.db, h.rt.secrets, { email: "held@example.com", password: "held password", address: "198.51.100.1" }).catch((error: ProblemError) => error.status);
        await entered.promise;
        const [waiting, clean] = await Promise.all([
          signIn(h.rt.db, h.rt.secrets, { email: "next@example.com", password: "not the password", address: "198.51.100.1" }).then(
            () => ({ status: 200, message: "signed in", headers: {} as Record<string, string> }),
            (error: ProblemError) => error,
          ),
          signIn(h.rt.db, h.rt.secrets, { email: OPERATOR.email, password: OPERATOR.password, address: "192.0.2.10" }).then((signedIn) => typeof signedIn.session),
        ]);
        expect({ status: waiting.status, detail: waiting.message, retryAfter: waiting.headers["retry-after"], clean }).toEqual({
          status: 429,
          detail: "Too many sign-ins are being checked at the moment. Try again in 5 seconds.",
          retryAfter: "5",
          clean: "string",
        });
        held.resolve();
        expect(await holder).toBe(401);
        // the checker is free again: the operator, from the address that failed, signs in
        expect(typeof (await signIn(h.rt.db, h.rt.secrets, { email: OPERATOR.email, password: OPERATOR.password, address: "198.51.100.1" })).session).toBe("string");
      },
    );
  }, 30_000);

  /** HOUR_MS is a clock step back of an hour, as chrony makes of a clock that started in local time read as UTC. */
  const HOUR_MS = 60 * 60 * 1000;

  test("a clock stepped back after failures holds a pair no longer than its count allows: failures stamped an hour ahead wait 1 s, then the right password gets in", async () => {
    const { db, from } = await serveConsole();
    const guesser = from("203.0.113.9");
    for (let i = 0; i < FREE_PAIR_FAILURES; i++) expect((await wrong(guesser)).status).toBe(401);
    // the failures as this clock reads them once it has been stepped back an hour
    await db.run("UPDATE login_failures SET window_start_at = window_start_at + ?, last_failure_at = last_failure_at + ?", [HOUR_MS, HOUR_MS]);
    await guesser.get("/console/login");
    const early = await guesser.post("/console/login", OPERATOR);
    expect([early.status, early.headers.get("retry-after")]).toEqual([429, "1"]);
    await passDelay(db, "203.0.113.9");
    expect((await guesser.signIn()).status).toBe(303);
  }, 20_000);

  test("a clock stepped back while an address is paced refuses it no longer than the 5 s queue: a next turn stamped an hour ahead is given, and the right password gets in", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const now = Date.now();
    await h.rt.db.run("INSERT INTO login_failures (scope, subject, failures, window_start_at, last_failure_at) VALUES ('address', '203.0.113.7', ?, ?, ?)", [PACED_AFTER.address, now, now]);
    await h.rt.db.run("INSERT INTO sign_in_turns (pace_key, next_turn_at) VALUES ('address:203.0.113.7', ?)", [now + HOUR_MS]);
    expect(await outcome(signIn(h.rt.db, h.rt.secrets, { email: OPERATOR.email, password: OPERATOR.password, address: "203.0.113.7" }))).toBe("signed in");
  }, 20_000);

  test("an email typed in another case, or between spaces, is the same account: its pair's delay holds it too", async () => {
    const { from } = await serveConsole();
    const guesser = from("203.0.113.9");
    for (let i = 0; i < FREE_PAIR_FAILURES; i++) expect((await wrong(guesser)).status).toBe(401);
    expect((await wrong(guesser, `  ${OPERATOR.email.toUpperCase()} `)).status).toBe(429);
    expect((await guesser.signIn({ ...OPERATOR, email: "OnCall@Example.COM" })).status).toBe(429);
    expect((await from("192.0.2.10").signIn({ ...OPERATOR, email: ` ${OPERATOR.email.toUpperCase()}` })).status).toBe(303);
  }, 20_000);

  test("the throttle keeps no email typed at sign-in, the operator's or a mistyped one: login_failures and sign_in_turns hold a keyed hash of it", async () => {
    const { h } = await setup();
    await addOperator(h.rt.db);
    const typo = "OnCall@Exampel.com";
    const attempt = (email: string, address: string) => outcome(signIn(h.rt.db, h.rt.secrets, { email, password: "not the password", address }));
    // one failure from each of 10 addresses puts the account under attack; the next try from one of them is paced, by the account's key
    for (let a = 1; a <= PACED_AFTER.account; a++) expect(await attempt(OPERATOR.email, `198.51.100.${a}`)).toBe("401");
    expect(await attempt(OPERATOR.email.toUpperCase(), "198.51.100.1")).toBe("401");
    expect(await attempt(typo, "198.51.100.1")).toBe("401");
    const failures = await h.rt.db.all<{ scope: string; subject: string; failures: number }>("SELECT scope, subject, failures FROM login_failures ORDER BY scope, failures DESC, subject");
    const turns = await h.rt.db.all<{ pace_key: string }>("SELECT pace_key FROM sign_in_turns ORDER BY pace_key");
    const stored = [...failures.map((row) => row.subject), ...turns.map((row) => row.pace_key)];
    expect(stored.filter((text) => /@|oncall|exampl/i.test(text))).toEqual([]);
    const [account, mistyped] = failures.filter((row) => row.scope === "account").map((row) => row.subject) as [string, string];
    expect(failures.filter((row) => row.scope === "account")).toEqual([
      { scope: "account", subject: account, failures: PACED_AFTER.account + 1 },
      { scope: "account", subject: mistyped, failures: 1 },
    ]);
    const pairs = (rows: { subject: string; failures: number }[]) => rows.map((row) => `${row.subject} ${row.failures}`).toSorted();
    expect(pairs(failures.filter((row) => row.scope === "pair"))).toEqual(
      pairs([
        { subject: `${account} 198.51.100.1`, failures: 2 },
        ...Array.from({ length: PACED_AFTER.account - 1 }, (_, i) => ({ subject: `${account} 198.51.100.${i + 2}`, failures: 1 })),
        { subject: `${mistyped} 198.51.100.1`, failures: 1 },
      ]),
    );
    expect(turns).toEqual([{ pace_key: `account:${account}` }]);
    // keyed: not the SHA-256 of the address, which anyone holding a list of emails could compute
    expect([account, mistyped].map((subject) => /^[A-Za-z0-9_-]{43}$/.test(subject))).toEqual([true, true]);
    expect(account).not.toBe(new Bun.CryptoHasher("sha256").update(OPERATOR.email).digest("base64url"));
  }, 30_000);

  test("crm operator unlock --email E forgets the failures counted against an account, so a guessing address may try at once", async () => {
    const { db, dataDir, from } = await serveConsole();
    const guesser = from("203.0.113.9");
    for (let i = 0; i < FREE_PAIR_FAILURES + 1; i++) await wrong(guesser);
    expect((await guesser.signIn()).status).toBe(429);
    const unlocked = runCli([...SOURCE, "operator", "unlock", "--email", OPERATOR.email.toUpperCase(), "--data-dir", dataDir]);
    expect(unlocked).toEqual({ exitCode: 0, stdout: `cleared 2 failed sign-in records of ${OPERATOR.email}\n`, stderr: "" });
    await afterBlockingCommand();
    expect(await pairRow(db, "203.0.113.9")).toBeNull();
    expect((await guesser.signIn()).status).toBe(303);
    const unknown = runCli([...SOURCE, "operator", "unlock", "--email", "nobody@example.com", "--data-dir", dataDir]);
    expect(unknown).toEqual({ exitCode: 2, stdout: "", stderr: "crm: No operator has the email nobody@example.com.\n" });
  }, 20_000);
});

describe("device cookies: an operator behind a guessing address", () => {
  let server: ConsoleServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  const COLLEAGUE = { email: "colleague@example.com", password: "another long password" };
  const GUESSED = "203.0.113.7";

  /** serveConsole starts the real server on the test backend behind a trusted proxy (127.0.0.1), with two operators; `from` makes a client at an address, holding a device cookie if given. */
  async function serveConsole() {
    server = await startConsoleServer({ trustedProxies: ["127.0.0.1"] });
    await addOperator(server.runtime.db);
    await addOperator(server.runtime.db, COLLEAGUE);
    const url = server.url;
    const from = (address: string, device?: string) => {
      const client = new ConsoleClient((request) => {
        request.headers.set("x-forwarded-for", address);
        return fetch(request, { redirect: "manual" });
      }, url);
      if (device !== undefined) client.cookies.set("crm_console_device", device);
      return client;
    };
    return { db: server.runtime.db, secrets: server.runtime.secrets, from };
  }

  /** deviceOf signs a client in and returns the device cookie it was given. */
  const deviceOf = async (client: ConsoleClient, operator = OPERATOR) => {
    expect((await client.signIn(operator)).status).toBe(303);
    return client.cookies.get("crm_console_device")!;
  };

  const wrong = async (client: ConsoleClient, email = OPERATOR.email) => {
    await client.get("/console/login");
    return client.post("/console/login", { email, password: "not the password" });
  };

  /**
   * holdPair records the operator's account and GUESSED as a pair with 13 failures, the last just
   * now: held for 15 minutes (as after many guesses), so a sign-in there without a trusted device
   * cookie is answered 429, whatever the timing.
   */
  const holdPair = (db: Database) =>
    db.run(
      `INSERT INTO login_failures (scope, subject, failures, window_start_at, last_failure_at) VALUES ('pair', ?, 13, ?, ?)
       ON CONFLICT (scope, subject) DO UPDATE SET failures = excluded.failures, last_failure_at = excluded.last_failure_at`,
      [`${emailSubject(server!.runtime.secrets, OPERATOR.email)} ${GUESSED}`, Date.now(), Date.now()],
    );

  /** guess makes GUESSED an address under attack: 20 wrong passwords, 3 of them for the operator, the others for emails that do not exist; then holds the operator's pair there. */
  const guess = async (db: Database, from: (address: string) => ConsoleClient) => {
    const guesser = from(GUESSED);
    for (let i = 0; i < FREE_PAIR_FAILURES; i++) expect((await wrong(guesser)).status).toBe(401);
    for (let e = FREE_PAIR_FAILURES; e < PACED_AFTER.address; e++) expect((await wrong(guesser, `guess${e}@example.com`)).status).toBe(401);
    expect(await db.get("SELECT failures FROM login_failures WHERE scope = 'address' AND subject = ?", [GUESSED])).toEqual({ failures: PACED_AFTER.address });
    await holdPair(db);
  };

  const deviceRows = async (db: Database) => (await db.get<{ n: number }>("SELECT count(*) AS n FROM operator_devices"))!.n;

  test("an address under attack (20 failures) lets a browser with a valid device cookie sign in beside the paced guesses, while a sign-in from it without one is refused 429", async () => {
    const { db, from } = await serveConsole();
    const device = await deviceOf(from("192.0.2.10")); // signed in at home yesterday
    await guess(db, from);
    expect((await from(GUESSED).signIn()).status).toBe(429);
    // 12 guesses for new emails at once: paced to one check a second, so some are checked (401) and the ones past a 5 s queue refused (429); the operator's browser takes no turn
    const [operator, ...guesses] = await Promise.all([from(GUESSED, device).signIn(), ...Array.from({ length: 12 }, (_, e) => wrong(from(GUESSED), `fresh${e}@example.com`))]);
    expect({ operator: operator.status, location: operator.headers.get("location"), guesses: [...new Set(guesses.map((g) => g.status))].toSorted() }).toEqual({
      operator: 303,
      location: "/console/",
      guesses: [401, 429],
    });
    // Its success does not clear the account and address pair: a client there without the cookie is still held.
    expect((await from(GUESSED).signIn()).status).toBe(429);
  }, 60_000);

  test("a tampered, expired or another operator's device cookie is no cookie: the sign-in is answered as without one, never with an error", async () => {
    const { db, secrets, from } = await serveConsole();
    const device = await deviceOf(from("192.0.2.10"));
    const colleagues = await deviceOf(from("192.0.2.11"), COLLEAGUE);
    const stale = await deviceOf(from("192.0.2.12"));
    const [id, nonce, expiry, signature] = device.split(".") as [string, string, string, string];
    const flip = (text: string) => `${text[0] === "A" ? "B" : "A"}${text.slice(1)}`;
    // a row 30 days old (its cookie says it is still valid), and a cookie signed right whose own expiry has passed (its row says not)
    await db.run("UPDATE operator_devices SET expires_at = ? WHERE id_hash = ?", [Date.now(), sha256(stale.split(".")[1]!)]);
    const expired = newDeviceCookie(secrets, id, Date.now() - DEVICE_TTL_MS - 1);
    await db.run("INSERT INTO operator_devices (id_hash, operator_id, failures, created_at, expires_at) VALUES (?, ?, 0, ?, ?)", [expired.row.id_hash, id, Date.now(), Date.now() + DEVICE_TTL_MS]);
    await guess(db, from);
    const cookies: Record<string, string | undefined> = {
      none: undefined,
      "signature altered": `${id}.${nonce}.${expiry}.${flip(signature)}`,
      "nonce altered": `${id}.${flip(nonce)}.${expiry}.${signature}`,
      "expiry moved on": `${id}.${nonce}.${Number(expiry) + 86_400_000}.${signature}`,
      "another operator's": colleagues,
      "another operator's id on this one's nonce": `${colleagues.split(".")[0]}.${nonce}.${expiry}.${signature}`,
      "row expired": stale,
      "cookie expired": expired.value,
      "not a device cookie": "hello",
      empty: "",
      "too long": `${device}${"x".repeat(5000)}`,
    };
    const answers: Record<string, number> = {};
    for (const [name, cookie] of Object.entries(cookies)) answers[name] = (await from(GUESSED, cookie).signIn()).status;
    expect(answers).toEqual(Object.fromEntries(Object.keys(cookies).map((name) => [name, 429])));
    // the colleague's own cookie is theirs alone; the untouched cookie still works
    expect((await from(GUESSED, colleagues).signIn(COLLEAGUE)).status).toBe(303);
    expect((await from(GUESSED, device).signIn()).status).toBe(303);
    // For an email nobody has, the operator's cookie changes nothing: the same 401 as without it.
    const unknown = async (cookie?: string) => {
      const client = from("192.0.2.20", cookie);
      await client.get("/console/login");
      return (await client.post("/console/login", { email: "nobody@example.com", password: OPERATOR.password })).status;
    };
    expect([await unknown(), await unknown(device)]).toEqual([401, 401]);
  }, 60_000);

  test("a device cookie is trusted for 5 wrong passwords, then sign-ins with it follow the address's rules; a burst at once cannot take more", async () => {
    const { db, from } = await serveConsole();
    const device = await deviceOf(from("192.0.2.10"));
    await guess(db, from);
    // 8 wrong passwords at once with the cookie: 5 are checked (401), the other 3 are strangers' and meet the pair's delay
    const burst = await Promise.all(Array.from({ length: DEVICE_FAILURES + 3 }, () => wrong(from(GUESSED, device))));
    expect(burst.map((res) => res.status).toSorted()).toEqual([...Array(DEVICE_FAILURES).fill(401), 429, 429, 429]);
    // spent: the right password with it is held as without a cookie
    expect((await from(GUESSED, device).signIn()).status).toBe(429);
    // from an address that has not been guessing it signs in, and the new cookie has a new budget
    const fresh = from("192.0.2.10", device);
    const renewed = await deviceOf(fresh);
    expect(renewed).not.toBe(device);
    for (let i = 0; i < DEVICE_FAILURES - 1; i++) expect((await wrong(from(GUESSED, renewed))).status).toBe(401);
    expect((await from(GUESSED, renewed).signIn()).status).toBe(303);
  }, 60_000);

  postgresOnly("a device cookie one instance gave is trusted by another instance on the same database and secrets key, and its budget is shared", async () => {
    const { db, from } = await serveConsole();
    const config = server!.runtime.config;
    const otherDir = mkdtempSync(join(tmpdir(), "crm-console-other-"));
    const other = await startServer({ ...config, port: 0, dataDir: otherDir }, createLogger("error", () => {}));
    try {
      const device = await deviceOf(from("192.0.2.10"));
      await guess(db, from);
      const atOther = (cookie?: string) => {
        const client = new ConsoleClient((request) => {
          request.headers.set("x-forwarded-for", GUESSED);
          return fetch(request, { redirect: "manual" });
        }, other.url);
        if (cookie !== undefined) client.cookies.set("crm_console_device", cookie);
        return client;
      };
      expect((await atOther().signIn()).status).toBe(429);
      // 4 wrong passwords with the cookie on the first instance, then 3 at once on the other: one check is left
      for (let i = 0; i < DEVICE_FAILURES - 1; i++) expect((await wrong(from(GUESSED, device))).status).toBe(401);
      const burst = await Promise.all(Array.from({ length: 3 }, () => wrong(atOther(device))));
      expect(burst.map((res) => res.status).toSorted()).toEqual([401, 429, 429]);
      const renewed = await deviceOf(from("192.0.2.10"));
      expect((await atOther(renewed).signIn()).status).toBe(303);
    } finally {
      await other.stop();
      rmSync(otherDir, { recursive: true, force: true });
    }
  }, 90_000);

  test("each sign-in replaces the device cookie; a password reset and the operator's removal revoke it, `operator unlock` keeps it", async () => {
    const { db, from } = await serveConsole();
    const first = await deviceOf(from("192.0.2.10"));
    const second = await deviceOf(from("192.0.2.10", first));
    expect(second).not.toBe(first);
    expect(await deviceRows(db)).toBe(1);
    await guess(db, from);
    expect((await from(GUESSED, first).signIn()).status).toBe(429); // replaced
    const third = await deviceOf(from(GUESSED, second));

    await unlockOperator(db, server!.runtime.secrets, OPERATOR.email);
    expect(await deviceRows(db)).toBe(1);
    await holdPair(db);
    const fourth = await deviceOf(from(GUESSED, third));

    const renewed = { ...OPERATOR, password: "a brand new password" };
    await resetOperatorPassword(db, server!.runtime.secrets, OPERATOR.email, renewed.password);
    expect(await deviceRows(db)).toBe(0);
    await holdPair(db);
    expect((await from(GUESSED, fourth).signIn(renewed)).status).toBe(429);

    const fifth = await deviceOf(from("192.0.2.10"), renewed);
    const operator = (await db.get<{ id: string }>("SELECT id FROM operators WHERE email = ?", [OPERATOR.email]))!;
    await removeOperator(db, operator.id);
    expect(await deviceRows(db)).toBe(0);
    await addOperator(db, renewed); // the same email again is another operator
    await holdPair(db);
    expect((await from(GUESSED, fifth).signIn(renewed)).status).toBe(429);
  }, 90_000);

  test("a browser that chose its password through a reset or invitation link holds a device cookie: it signs in from a guessing address, a browser without it is refused 429", async () => {
    const { db, from } = await serveConsole();
    /** choosePassword follows a one-time link from a quiet address and returns the device cookie the answer set. */
    const choosePassword = async (fields: Record<string, string>) => {
      const client = from("192.0.2.10");
      expect((await client.get(`/console/welcome?code=${fields.code}`)).status).toBe(200);
      const done = await client.post("/console/welcome", fields);
      expect({ status: done.status, session: client.cookies.has("crm_console_session"), device: client.cookies.get("crm_console_device")?.split(".")[0] }).toEqual({
        status: 303,
        session: true,
        device: (await db.get<{ id: string }>("SELECT id FROM operators WHERE email = ?", [fields.email ?? OPERATOR.email]))?.id ?? "no such operator",
      });
      return client.cookies.get("crm_console_device")!;
    };
    const operatorId = (await db.get<{ id: string }>("SELECT id FROM operators WHERE email = ?", [OPERATOR.email]))!.id;
    const renewed = { ...OPERATOR, password: "a brand new password" };
    const reset = await choosePassword({ code: (await passwordResetLink(db, operatorId, null)).code, password: renewed.password, password_again: renewed.password });
    expect(await deviceRows(db)).toBe(1);
    await guess(db, from);
    expect((await from(GUESSED).signIn(renewed)).status).toBe(429);
    expect((await from(GUESSED, reset).signIn(renewed)).status).toBe(303);

    const NEWCOMER = { email: "newcomer@example.com", password: "the newcomer's password" };
    const invited = await choosePassword({ code: await inviteOperator(db, NEWCOMER.email, { id: operatorId, email: OPERATOR.email }), email: NEWCOMER.email, password: NEWCOMER.password, password_again: NEWCOMER.password });
    await db.run(
      `INSERT INTO login_failures (scope, subject, failures, window_start_at, last_failure_at) VALUES ('pair', ?, 13, ?, ?)`,
      [`${emailSubject(server!.runtime.secrets, NEWCOMER.email)} ${GUESSED}`, Date.now(), Date.now()],
    );
    expect((await from(GUESSED).signIn(NEWCOMER)).status).toBe(429);
    expect((await from(GUESSED, invited).signIn(NEWCOMER)).status).toBe(303);
  }, 90_000);
});
