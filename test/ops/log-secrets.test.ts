import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { api, createToken, runCli, SOURCE, spawnServer, tempDir, waitUntil, type ServerProcess } from "./support.ts";
import { PayloadCheck } from "../support/webhook-payloads.ts";

const METRICS_TOKEN = "metrics-secret-Zq81mV0pLr2x";
const PASSWORD = "operator-password-Xk92!vQe";
const RECEIVER_KEY = "receiver-query-key-7Hc3Pd";
const WRONG_TOKEN = "crm_WrongTokenSentByMistake0000000000000000";

function setCookies(res: Response): Record<string, string> {
  return Object.fromEntries(res.headers.getSetCookie().map((c) => c.split(";")[0]!.split("=") as [string, string]));
}

function csrfOf(html: string): string {
  const token = /name="_csrf" value="([^"]+)"/.exec(html)?.[1];
  if (!token) throw new Error("no CSRF token in the form");
  return token;
}

/**
 * signIn goes through the console's sign-in form like a browser: a wrong password first, then the
 * right one. It returns every cookie value the server handed out.
 */
async function signIn(url: string, email: string): Promise<string[]> {
  const page = await fetch(`${url}/console/login`);
  const pre = setCookies(page);
  const csrf = csrfOf(await page.text());
  const cookie = Object.entries(pre).map(([k, v]) => `${k}=${v}`).join("; ");
  const post = (password: string) =>
    fetch(`${url}/console/login`, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie, origin: url, "sec-fetch-site": "same-origin" },
      body: new URLSearchParams({ email, password, _csrf: csrf }).toString(),
    });
  expect((await post(`${PASSWORD}-wrong`)).status).not.toBe(303);
  const res = await post(PASSWORD);
  expect(res.status).toBe(303);
  const session = setCookies(res);
  const home = await fetch(`${url}/console/`, { headers: { cookie: Object.entries(session).map(([k, v]) => `${k}=${v}`).join("; ") } });
  expect(home.status).toBe(200);
  return [...Object.values(pre), ...Object.values(session), csrf].filter((v) => v.length >= 16);
}

describe("logs never carry a secret", () => {
  let server: ServerProcess;
  let receiver: ReturnType<typeof Bun.serve>;
  let received = 0;
  const payloads = new PayloadCheck();
  const secrets: Record<string, string> = { METRICS_TOKEN, PASSWORD, RECEIVER_KEY, WRONG_TOKEN };

  beforeAll(async () => {
    // The receiver fails the first attempt of every delivery, so retries are logged too.
    const seen = new Set<string>();
    receiver = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(request) {
        received++;
        payloads.check(await request.text());
        const id = request.headers.get("webhook-id")!;
        if (seen.has(id)) return new Response("ok");
        seen.add(id);
        return new Response(`not yet, signature ${request.headers.get("webhook-signature")}`, { status: 500 });
      },
    });
    const dataDir = tempDir("secrets");
    secrets.API_TOKEN = createToken(SOURCE, dataDir);
    const operator = runCli([...SOURCE, "operator", "create", "--email", "ops@example.com", "--password-stdin", "--data-dir", dataDir], { stdin: `${PASSWORD}\n` });
    expect(operator.exitCode).toBe(0);
    server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "debug", "--retry-schedule", "0.05,0.05"], {
      env: { PATH: process.env.PATH ?? "", CRM_ALLOW_PRIVATE_TARGETS: "1", CRM_METRICS_TOKEN: METRICS_TOKEN },
    });
  });

  afterAll(() => {
    receiver.stop(true);
    payloads.assertValid();
  });

  test("a full scenario: API, webhooks with retries, console sign-in, metrics, errors; then SIGTERM", async () => {
    const token = secrets.API_TOKEN!;
    const target = `http://127.0.0.1:${receiver.port}/hook?key=${RECEIVER_KEY}`;
    const sub = await api(server.url, token, "POST", "/public/v1/webhook-subscriptions", { target_url: target, events: ["contact.created", "contact.updated"] });
    expect(sub.status).toBe(201);
    secrets.WEBHOOK_SECRET = sub.body.data.secret;
    secrets.WEBHOOK_KEY = sub.body.data.secret.slice("whsec_".length);

    const contact = await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Ada", email: "ada@example.com" });
    expect(contact.status).toBe(201);
    expect((await api(server.url, token, "PATCH", `/public/v1/contacts/${contact.body.data.id}`, { last_name: "Lovelace" })).status).toBe(200);
    // Misbehaving clients: a token in the query string, a wrong token, a token in a body.
    expect((await fetch(`${server.url}/public/v1/contacts?access_token=${token}`)).status).toBe(401);
    expect((await api(server.url, WRONG_TOKEN, "GET", "/public/v1/contacts")).status).toBe(401);
    expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: 7, note: token })).status).toBe(422);
    expect((await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).status).toBe(200);
    expect((await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}-wrong` } })).status).toBe(401);

    for (const [i, value] of (await signIn(server.url, "ops@example.com")).entries()) secrets[`COOKIE_OR_CSRF_${i}`] = value;

    // Two deliveries, each failing once, then succeeding.
    await waitUntil(() => received >= 4, "the webhook attempts", server.proc);
    await waitUntil(() => server.logLines().filter((l) => l.msg === "webhook attempt").length >= 4, "the attempt log lines", server.proc);
    expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });

    const output = server.output();
    const leaked = Object.entries(secrets).filter(([, value]) => output.includes(value)).map(([name]) => name);
    expect(leaked).toEqual([]);
    expect(output).not.toContain("whsec_");
    expect(output).not.toContain("v1,");

    // Structured: every line is JSON with a time, a level and a message, except the one "listening on" line.
    const lines = output.trimEnd().split("\n");
    expect(lines.filter((l) => !l.startsWith("{"))).toEqual([`listening on ${server.url}`]);
    for (const line of server.logLines()) expect(Object.keys(line).slice(0, 3)).toEqual(["time", "level", "msg"]);
    const attempts = server.logLines().filter((l) => l.msg === "webhook attempt");
    // Sorted: the two deliveries' attempts may interleave.
    expect(attempts.map((l) => [l.level, l.response_status, l.trigger]).sort()).toEqual([
      ["info", 200, "scheduled"],
      ["info", 200, "scheduled"],
      ["info", 500, "scheduled"],
      ["info", 500, "scheduled"],
    ]);
    expect(server.logLines().filter((l) => l.msg === "request").length).toBeGreaterThanOrEqual(10);
  }, 30_000);
});
