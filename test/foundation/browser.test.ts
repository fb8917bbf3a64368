import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { RunningServer } from "../../server/server.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { contactCount, expectProblem, listeningServer } from "./support.ts";

const REFUSAL = {
  type: "urn:crm:problem:browser-request",
  title: "Forbidden",
  status: 403,
  detail: "This API does not accept calls from browsers. API tokens are secrets for server-side code (a backend job, an import script); never put them in browser code.",
};

const corsHeaders = (headers: Headers) => [...headers.keys()].filter((k) => k.toLowerCase().startsWith("access-control-"));

describe("browser refusal: in-process", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(async () => await h.close());

  test("a request with Origin or Sec-Fetch-Site is 403 explaining tokens belong server-side", async () => {
    const browsers: Record<string, string>[] = [
      { origin: "https://shop.example" },
      { origin: "null" },
      { "sec-fetch-site": "same-origin" },
      { "sec-fetch-site": "cross-site", origin: "https://shop.example" },
      { "sec-fetch-site": "none" },
    ];
    for (const headers of browsers) {
      for (const [method, path, body] of [
        ["POST", "/public/v1/contacts", { first_name: "Form" }],
        ["GET", "/public/v1/contacts", undefined],
        ["POST", "/public/v1/accounts", { name: "x" }],
        ["GET", "/public/v1/users", undefined],
      ] as const) {
        const res = await h.json(method, path, { body, headers });
        expect({ headers, method, path, status: res.status, body: res.body }).toEqual({ headers, method, path, status: 403, body: REFUSAL });
        expect(res.headers.get("content-type")).toBe("application/problem+json");
        expect(corsHeaders(res.headers)).toEqual([]);
      }
    }
    expect(await contactCount(h)).toBe(0);
  });

  test("refused even without a token: the browser learns nothing else", async () => {
    const res = await h.json("GET", "/public/v1/contacts", { headers: { authorization: "", origin: "https://shop.example" } });
    expect(res.status).toBe(403);
    expect(res.body).toEqual(REFUSAL);
  });

  test("a CORS preflight gets no Access-Control-* headers", async () => {
    const preflights: Record<string, string>[] = [
      { origin: "https://shop.example", "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type, idempotency-key" },
      { "access-control-request-method": "POST" },
      {},
    ];
    for (const headers of preflights) {
      const res = await h.app.handle(new Request("http://localhost/public/v1/contacts", { method: "OPTIONS", headers }));
      expect(corsHeaders(res.headers)).toEqual([]);
      expect(res.status).toBeGreaterThanOrEqual(400);
      expectProblem({ status: res.status, headers: res.headers, body: await res.json() }, res.status);
    }
  });

  test("form-encoded and multipart bodies are 415", async () => {
    for (const [type, body] of [
      ["application/x-www-form-urlencoded", "first_name=Ada&email=ada%40example.com"],
      ["multipart/form-data; boundary=x", '--x\r\nContent-Disposition: form-data; name="first_name"\r\n\r\nAda\r\n--x--\r\n'],
      ["text/plain", '{"first_name":"Ada"}'],
    ]) {
      const res = await h.json("POST", "/public/v1/contacts", { body, headers: { "content-type": type! } });
      expectProblem(res, 415, "unsupported-media-type");
      expect(res.body.detail).toBe(`Content-Type ${type!.split(";")[0]} is not accepted; send application/json.`);
    }
    expect(await contactCount(h)).toBe(0);
  });

  test("JSON declared in a charset other than UTF-8 is 415 and stores nothing; UTF-8 declared either way, and a +json type, are read", async () => {
    for (const charset of ["iso-8859-1", "utf-16", '"latin1"']) {
      const res = await h.json("POST", "/public/v1/contacts", { body: '{"first_name":"Ada"}', headers: { "content-type": `application/json; charset=${charset}` } });
      expectProblem(res, 415, "unsupported-media-type");
      expect(res.body.detail).toBe(`Content-Type charset ${charset.replaceAll('"', "")} is not accepted; send the JSON in UTF-8 (charset=utf-8, or no charset).`);
    }
    expect(await contactCount(h)).toBe(0);
    const accepted = [];
    for (const type of ["application/json; charset=utf-8", "application/json;charset=UTF8", "application/json; charset=us-ascii", "application/vnd.api+json"]) {
      accepted.push((await h.json("POST", "/public/v1/contacts", { body: '{"first_name":"Zoë"}', headers: { "content-type": type } })).body.data.first_name);
    }
    expect(accepted).toEqual(["Zoë", "Zoë", "Zoë", "Zoë"]);
  });
});

describe("server-side clients: through a real listening server", () => {
  let running: Awaited<ReturnType<typeof listeningServer>>;
  let server: RunningServer;
  let token: string;
  beforeAll(async () => {
    running = await listeningServer("clients");
    ({ server, token } = running);
  });
  afterAll(() => running.stop());

  // Each client creates one contact and then lists by its email; it prints both bodies as JSON.
  async function run(cmd: string[], env: Record<string, string> = {}) {
    const proc = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe", env: { ...process.env, ...env } });
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    expect({ code, err }).toEqual({ code: 0, err: "" });
    return out;
  }

  function expectCreatedAndListed(created: any, listed: any, email: string, name: string) {
    expect(created.data).toMatchObject({ first_name: name, email });
    expect(listed).toEqual({ data: [created.data], meta: { current_page: 1, last_page: 1, per_page: 25, total: 1, next_cursor: null } });
  }

  const NODE_CLIENT = `
    const [url, token, email, name] = process.argv.slice(-4);
    const headers = { authorization: "Bearer " + token, "content-type": "application/json", "idempotency-key": "node-" + email };
    (async () => {
      const created = await fetch(url + "/public/v1/contacts", { method: "POST", headers, body: JSON.stringify({ first_name: name, email }) });
      if (created.status !== 201) throw new Error("create " + created.status + " " + await created.text());
      const listed = await fetch(url + "/public/v1/contacts?email=" + encodeURIComponent(email), { headers: { authorization: "Bearer " + token } });
      if (listed.status !== 200) throw new Error("list " + listed.status);
      console.log(JSON.stringify([await created.json(), await listed.json()]));
    })().catch((e) => { console.error(e); process.exit(1); });`;

  test("Node's fetch", async () => {
    const out = await run(["node", "-e", NODE_CLIENT, server.url, token, "node@clients.test", "Node"]);
    const [created, listed] = JSON.parse(out);
    expectCreatedAndListed(created, listed, "node@clients.test", "Node");
  });

  test("Bun's fetch", async () => {
    const out = await run([process.execPath, "-e", NODE_CLIENT, server.url, token, "bun@clients.test", "Bun"]);
    const [created, listed] = JSON.parse(out);
    expectCreatedAndListed(created, listed, "bun@clients.test", "Bun");
  });

  test("curl", async () => {
    const email = "curl@clients.test";
    const created = JSON.parse(
      await run(["curl", "-sS", "--fail-with-body", "-X", "POST", `${server.url}/public/v1/contacts`, "-H", `Authorization: Bearer ${token}`, "-H", "Content-Type: application/json", "-H", "Idempotency-Key: curl-1", "--data", JSON.stringify({ first_name: "Curl", email })]),
    );
    const listed = JSON.parse(await run(["curl", "-sS", "--fail-with-body", `${server.url}/public/v1/contacts?email=${encodeURIComponent(email)}`, "-H", `Authorization: Bearer ${token}`]));
    expectCreatedAndListed(created, listed, email, "Curl");
  });

  test("a browser-like request to the real server is refused", async () => {
    const res = await fetch(`${server.url}/public/v1/contacts`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", origin: "https://shop.example", "sec-fetch-site": "cross-site" },
      body: JSON.stringify({ first_name: "Browser" }),
    });
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual(REFUSAL);
    expect(corsHeaders(res.headers)).toEqual([]);
  });
});
