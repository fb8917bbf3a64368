import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LOGIN_FAILURE_LIMITS, LOGIN_WINDOW_MS, SESSION_IDLE_MS, SETUP_CODE_TTL_MS, issueSetupCode } from "../../console/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { startServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { addOperator, ConsoleClient, OPERATOR } from "./support.ts";

let harness: Harness | undefined;
afterEach(() => {
  harness?.close();
  harness = undefined;
});

function setup() {
  harness = createHarness();
  return { h: harness, client: new ConsoleClient((r) => harness!.app.handle(r)) };
}

/** signedIn returns a client of the harness's console that has signed in as the test operator. */
async function signedIn(h: Harness): Promise<ConsoleClient> {
  const client = new ConsoleClient((r) => h.app.handle(r));
  expect((await client.signIn()).status).toBe(303);
  return client;
}

const sha256 = (text: string) => new Bun.CryptoHasher("sha256").update(text).digest();
const operatorCount = (h: Harness) => h.rt.db.query<{ n: number }, []>("SELECT count(*) AS n FROM operators").get()!.n;
const sessionRows = (h: Harness) => h.rt.db.query<{ id_hash: Uint8Array; last_seen_at: number }, []>("SELECT id_hash, last_seen_at FROM operator_sessions").all();

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

  test("the setup link opens a form that creates the first operator (argon2id) and signs in", async () => {
    const { h, client } = setup();
    const code = issueSetupCode(h.rt.db);
    const page = await client.get(`/console/setup?code=${code}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain("Create the first operator");
    const done = await client.post("/console/setup", { code, email: " First@Example.com ", password: "a long enough secret", password_again: "a long enough secret" });
    expect(done.status).toBe(303);
    expect(done.headers.get("location")).toBe("/console/");
    const home = await client.get("/console/");
    expect(home.status).toBe(200);
    expect(home.text).toContain("first@example.com");
    const row = h.rt.db.query<{ email: string; password_hash: string }, []>("SELECT email, password_hash FROM operators").get()!;
    expect(row.email).toBe("first@example.com");
    expect(row.password_hash).toStartWith("$argon2id$");
    expect(await Bun.password.verify("a long enough secret", row.password_hash)).toBe(true);
  });

  test("a setup link works once, expires after 30 minutes, and a newer link replaces it", async () => {
    const { h, client } = setup();
    const expired = issueSetupCode(h.rt.db, Date.now() - SETUP_CODE_TTL_MS - 1);
    expect((await client.get(`/console/setup?code=${expired}`)).status).toBe(403);
    const older = issueSetupCode(h.rt.db);
    const newer = issueSetupCode(h.rt.db);
    const refused = await client.get(`/console/setup?code=${older}`);
    expect(refused.status).toBe(403);
    expect(refused.text).toContain("invalid, expired or already used");
    await client.get(`/console/setup?code=${newer}`);
    expect((await client.post("/console/setup", { code: newer, email: "a@example.com", password: "0123456789", password_again: "0123456789" })).status).toBe(303);
    const reuse = new ConsoleClient((r) => h.app.handle(r));
    expect((await reuse.get(`/console/setup?code=${newer}`)).status).toBe(403);
    expect((await reuse.post("/console/setup", { code: newer, email: "b@example.com", password: "0123456789", password_again: "0123456789" })).status).toBe(403);
    expect(operatorCount(h)).toBe(1);
  });

  test("setup refuses a bad email, a short password or two different passwords, and creates nothing", async () => {
    const { h, client } = setup();
    const code = issueSetupCode(h.rt.db);
    await client.get(`/console/setup?code=${code}`);
    const cases: [Record<string, string>, string][] = [
      [{ email: "not-an-email", password: "0123456789", password_again: "0123456789" }, "email must be an email address"],
      [{ email: "a@example.com", password: "short", password_again: "short" }, "password must be 10 to 512 characters"],
      [{ email: "a@example.com", password: "0123456789", password_again: "9876543210" }, "The two passwords differ."],
    ];
    for (const [fields, message] of cases) {
      const res = await client.post("/console/setup", { code, ...fields });
      expect(res.status).toBe(422);
      expect(res.text).toContain(message);
    }
    expect(operatorCount(h)).toBe(0);
  });

  test("`operator create --email E --password-stdin` adds an operator who can sign in", async () => {
    const { h, client } = setup();
    const run = (args: string[], stdin: string) => {
      const child = Bun.spawnSync([process.execPath, join(import.meta.dir, "../../server/main.ts"), "operator", "create", ...args, "--data-dir", h.dataDir], { stdin: Buffer.from(stdin) });
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
  test("signing in sets an HttpOnly, SameSite=Strict session cookie for /console, Secure only over https", async () => {
    const { h } = setup();
    await addOperator(h.rt.db);
    for (const [base, secure] of [["http://localhost", false], ["https://localhost", true]] as const) {
      const client = new ConsoleClient((r) => h.app.handle(r), base);
      const res = await client.signIn();
      expect(res.status).toBe(303);
      const cookies = res.headers.getSetCookie();
      const value = client.cookies.get("crm_console_session")!;
      expect(value).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(cookies).toEqual([
        `crm_console_session=${value}; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}`,
        `crm_console_csrf=; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}; Max-Age=0`,
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
      return res.headers.getSetCookie().map((c) => c.replace(/^crm_console_session=[^;]+/, "crm_console_session=…"));
    };
    const cookies = (secure: boolean) => [
      `crm_console_session=…; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}`,
      `crm_console_csrf=; Path=/console; HttpOnly; SameSite=Strict${secure ? "; Secure" : ""}; Max-Age=0`,
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
    const { h } = setup();
    await addOperator(h.rt.db);
    const [a, b] = [await signedIn(h), await signedIn(h)];
    const ids = [a.cookies.get("crm_console_session")!, b.cookies.get("crm_console_session")!];
    expect(ids[0]).not.toBe(ids[1]);
    const stored = sessionRows(h).map((r) => Buffer.from(r.id_hash).toString("hex")).sort();
    expect(stored).toEqual(ids.map((id) => Buffer.from(sha256(id)).toString("hex")).sort());
  });

  test("a wrong password or unknown email is refused with 401 and no session", async () => {
    const { h, client } = setup();
    await addOperator(h.rt.db);
    for (const attempt of [{ email: OPERATOR.email, password: "wrong password!" }, { email: "nobody@example.com", password: OPERATOR.password }]) {
      await client.get("/console/login");
      const res = await client.post("/console/login", attempt);
      expect(res.status).toBe(401);
      expect(res.text).toContain("The email or password is wrong.");
      expect(client.cookies.has("crm_console_session")).toBe(false);
    }
    expect(sessionRows(h)).toEqual([]);
    expect((await client.get("/console/")).status).toBe(303);
  });

  test("logout ends the session: the old cookie no longer opens pages", async () => {
    const { h, client } = setup();
    await addOperator(h.rt.db);
    await client.signIn();
    const cookie = `crm_console_session=${client.cookies.get("crm_console_session")}`;
    await client.get("/console/");
    const out = await client.post("/console/logout", {});
    expect(out.status).toBe(303);
    expect(out.headers.get("location")).toBe("/console/login");
    expect(out.headers.getSetCookie()).toEqual(["crm_console_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"]);
    expect(sessionRows(h)).toEqual([]);
    const replay = await h.app.handle(new Request("http://localhost/console/", { headers: { cookie } }));
    expect(replay.status).toBe(303);
    expect(replay.headers.get("location")).toBe("/console/login?next=%2Fconsole%2F");
  });

  test("a session idle for 12 hours ends; using a session keeps it alive", async () => {
    const { h } = setup();
    await addOperator(h.rt.db);
    const [idle, busy] = [await signedIn(h), await signedIn(h)];
    const hashOf = (c: ConsoleClient) => sha256(c.cookies.get("crm_console_session")!);
    const now = Date.now();
    h.rt.db.query("UPDATE operator_sessions SET last_seen_at = ? WHERE id_hash = ?").run(now - SESSION_IDLE_MS - 1, hashOf(idle));
    h.rt.db.query("UPDATE operator_sessions SET last_seen_at = ? WHERE id_hash = ?").run(now - SESSION_IDLE_MS + 60_000, hashOf(busy));
    const expired = await idle.get("/console/tokens");
    expect(expired.status).toBe(303);
    expect(expired.headers.get("location")).toBe("/console/login?next=%2Fconsole%2Ftokens");
    expect((await busy.get("/console/tokens")).status).toBe(200);
    const seen = h.rt.db.query<{ last_seen_at: number }, [Uint8Array]>("SELECT last_seen_at FROM operator_sessions WHERE id_hash = ?").get(hashOf(busy))!;
    expect(seen.last_seen_at).toBeGreaterThanOrEqual(now);
  });

  test("after sign-in the operator lands on the page they asked for, never outside the console", async () => {
    const { h } = setup();
    await addOperator(h.rt.db);
    const cases: [string, string][] = [
      ["/console/users?page=1", "/console/users?page=1"],
      ["https://evil.example/console/", "/console/"],
      ["//evil.example/console/", "/console/"],
      ["/console/\\evil.example", "/console/"],
    ];
    for (const [next, landing] of cases) {
      const client = new ConsoleClient((r) => h.app.handle(r));
      await client.get(`/console/login?next=${encodeURIComponent(next)}`);
      const res = await client.post("/console/login", { ...OPERATOR, next });
      expect(res.headers.get("location")).toBe(landing);
    }
  });
});

describe("sign-in throttling", () => {
  const failures = async (client: ConsoleClient, email: string, times: number) => {
    for (let i = 0; i < times; i++) {
      await client.get("/console/login");
      expect((await client.post("/console/login", { email, password: "not the password" })).status).toBe(401);
    }
  };

  test("five failures lock an account for 15 minutes, even with the right password; others are unaffected", async () => {
    const { h, client } = setup();
    await addOperator(h.rt.db);
    await addOperator(h.rt.db, { email: "other@example.com", password: OPERATOR.password });
    await failures(client, OPERATOR.email, LOGIN_FAILURE_LIMITS.account);
    await client.get("/console/login");
    const locked = await client.post("/console/login", OPERATOR);
    expect(locked.status).toBe(429);
    expect(locked.text).toContain("Too many failed sign-ins. Try again in 15 minutes.");
    const retryAfter = Number(locked.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(LOGIN_WINDOW_MS / 1000 - 60);
    expect(retryAfter).toBeLessThanOrEqual(LOGIN_WINDOW_MS / 1000);
    expect(client.cookies.has("crm_console_session")).toBe(false);
    expect((await client.signIn({ email: "other@example.com", password: OPERATOR.password })).status).toBe(303);
    // The window passes: the account can sign in again, and success clears its count.
    h.rt.db.query("UPDATE login_failures SET window_start_at = window_start_at - ?").run(LOGIN_WINDOW_MS);
    await signedIn(h);
    expect(h.rt.db.query("SELECT * FROM login_failures WHERE scope = 'account' AND subject = ?").all(OPERATOR.email)).toEqual([]);
  });

  test("twenty failures from one address lock it for every account; unknown emails count too", async () => {
    const { h, client } = setup();
    await addOperator(h.rt.db);
    const perAccount = LOGIN_FAILURE_LIMITS.account - 1;
    for (let i = 0; i < LOGIN_FAILURE_LIMITS.address / perAccount; i++) await failures(client, `guess${i}@example.com`, perAccount);
    await client.get("/console/login");
    const locked = await client.post("/console/login", OPERATOR);
    expect(locked.status).toBe(429);
    expect(h.rt.db.query("SELECT failures FROM login_failures WHERE scope = 'address'").all()).toEqual([{ failures: LOGIN_FAILURE_LIMITS.address }]);
  });
});
