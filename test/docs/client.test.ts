// The typed client in client/: generated from the document the server serves, and its README's
// example run against a real server.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { clientFiles, CLIENT_DIR, servedDocument } from "../../scripts/generate-client.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { createCrmClient } from "../../client/index.js";

const committed = (name: string) => readFileSync(join(CLIENT_DIR, name), "utf8");

/** firstDifference shows the first line where `actual` differs from `expected`, with its number, or null when they are equal. */
function firstDifference(expected: string, actual: string): string | null {
  if (expected === actual) return null;
  const [want, got] = [expected.split("\n"), actual.split("\n")];
  const line = want.findIndex((text, i) => text !== got[i]);
  const at = line < 0 ? want.length : line;
  return `line ${at + 1}: committed ${JSON.stringify(want[at])}, served ${JSON.stringify(got[at])}`;
}

/** run runs a program to its end without blocking this process, which serves the requests the program makes. */
async function run(command: string[], env: Record<string, string>, cwd?: string): Promise<{ stdout: string; stderr: string; exitCode: number }> {
  const child = Bun.spawn(command, { env: { ...process.env, ...env }, cwd, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { stdout, stderr, exitCode };
}

describe("generated client", () => {
  test("client/openapi.json and client/schema.d.ts are what the served document generates (else: npm run client:generate)", async () => {
    const files = await clientFiles(await servedDocument());
    expect(Object.keys(files).sort()).toEqual(["openapi.json", "schema.d.ts"]);
    for (const [name, text] of Object.entries(files)) expect(firstDifference(committed(name), text), `client/${name} is stale: run npm run client:generate`).toBeNull();
  }, 60_000);

  test("the types name every operation by its operationId and type error answers as Problem", () => {
    const types = committed("schema.d.ts");
    const document = JSON.parse(committed("openapi.json"));
    const ids = Object.values(document.paths as Record<string, Record<string, { operationId: string }>>).flatMap((item) => Object.values(item).map((op) => op.operationId));
    expect(ids.filter((id) => !types.includes(`get: operations["${id}"]`) && !types.includes(`: operations["${id}"];`))).toEqual([]);
    expect(types).toContain('"application/problem+json": components["schemas"]["Problem"];');
  });

  test("the README's example is client/example.ts, importing the package by name", () => {
    const readme = committed("README.md");
    const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBe(committed("example.ts").replace('from "./index.js"', 'from "@crm/client"'));
  });
});

describe("README example against a real server", () => {
  let server: RunningServer;
  let dataDir: string;
  let token: string;

  beforeEach(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "crm-client-example-"));
    server = await startServer({ ...DEFAULT_CONFIG, host: "127.0.0.1", port: 0, dataDir, logLevel: "error" }, createLogger("error"));
    token = (await createApiToken(server.runtime.db, "client-example")).token;
  });

  afterEach(async () => {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const runExample = async (...args: string[]) => {
    const { stdout, stderr, exitCode } = await run([process.execPath, join(CLIENT_DIR, "example.ts"), ...args], { CRM_URL: server.url, CRM_TOKEN: token });
    expect(stderr).toBe("");
    expect(exitCode).toBe(0);
    return stdout.trim().split("\n");
  };
  const api = async (path: string) => (await (await fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${token}` } })).json()) as any;

  test("--trial imports one record; the full run resolves the account, updates that one and creates the other; a re-run creates nothing", async () => {
    const [trial] = await runExample("--trial");
    const [, adaId] = /^row-1 created (con_\w+)$/.exec(trial ?? "") ?? [];
    expect(adaId).toBeString();
    expect((await api("/public/v1/contacts")).meta.total).toBe(1);

    const full = await runExample();
    expect(full[0]).toBe(`row-1 updated ${adaId}`);
    const [, charlesId] = /^row-2 created (con_\w+)$/.exec(full[1] ?? "") ?? [];
    expect(full.length).toBe(2);

    const accounts = (await api("/public/v1/accounts")).data;
    expect(accounts.map((a: any) => [a.name, a.domain])).toEqual([["Analytical Engines", "engines.example"]]);
    const contacts = (await api("/public/v1/contacts?sort_by=email&sort_direction=asc")).data;
    expect(contacts.map((c: any) => [c.id, c.email, c.full_name, c.account_ids])).toEqual([
      [adaId, "ada@example.com", "Ada Lovelace", [accounts[0].id]],
      [charlesId, "charles@example.com", "Charles Babbage", [accounts[0].id]],
    ]);

    expect(await runExample()).toEqual([`row-1 updated ${adaId}`, `row-2 updated ${charlesId}`]);
    expect((await api("/public/v1/contacts")).meta.total).toBe(2);
    expect((await api("/public/v1/accounts")).meta.total).toBe(1);
  }, 60_000);

  test("the types take a contact's custom fields and consent as the objects the server takes (type-checked with the suite)", async () => {
    const crm = createCrmClient({ baseUrl: server.url, token });
    const { data } = await crm.POST("/public/v1/contacts", { body: { first_name: "Ada", custom_fields: { plan: "pro", seats: 3 }, consent: { email: true } } });
    expect([data?.data.custom_fields, data?.data.consent]).toEqual([{ plan: "pro", seats: 3 }, { email: true }]);
  });

  test("an error answer reaches the caller as the problem document", async () => {
    const script = `import { createCrmClient } from ${JSON.stringify(join(CLIENT_DIR, "index.js"))};
const crm = createCrmClient({ baseUrl: process.env.CRM_URL, token: process.env.CRM_TOKEN });
const { data, error, response } = await crm.POST("/public/v1/contacts", { body: { email: "not an email" } });
console.log(JSON.stringify({ data, error, status: response.status }));`;
    // Node runs the package's JavaScript as it is, from outside the repository.
    const runtime = Bun.which("node") ?? process.execPath;
    const result = await run([runtime, "--input-type=module", "-e", script], { CRM_URL: `${server.url}/`, CRM_TOKEN: token }, tmpdir());
    expect(result.stderr).toBe("");
    expect(JSON.parse(result.stdout)).toEqual({
      error: {
        type: "urn:crm:problem:validation",
        title: "Unprocessable Content",
        status: 422,
        detail: "The request has invalid fields.",
        errors: [{ pointer: "/email", detail: "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null" }],
      },
      status: 422,
    });
  }, 60_000);
});
