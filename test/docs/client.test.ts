// The typed client in client/: generated from the document the server serves, and its README's
// example run against a real server.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { clientFiles, CLIENT_DIR, servedDocument } from "../../scripts/generate-client.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { createCrmClient } from "../../client/index.js";
import { WEBHOOK_EVENT_TYPES } from "../../server/webhooks/model.ts";

const ROOT = join(CLIENT_DIR, "..");

const committed = (name: string) => readFileSync(join(CLIENT_DIR, name), "utf8");

/** firstDifference shows the first line where `actual` differs from `expected`, with its number, or null when they are equal. */
function firstDifference(expected: string, actual: string): string | null {
  if (expected === actual) return null;
  const [want, got] = [expected.split("\n"), actual.split("\n")];
  const line = want.findIndex((text, i) => text !== got[i]);
  const at = line < 0 ? want.length : line;
  return `line ${at + 1}: committed ${JSON.stringify(want[at])}, served ${JSON.stringify(got[at])}`;
}

/** readmeBlock is the TypeScript block of `file` (a README) after the first line holding `marker`. */
function readmeBlock(file: string, marker: string): string {
  const readme = readFileSync(file, "utf8");
  const at = readme.indexOf(marker);
  expect(at, `${marker} in ${file}`).toBeGreaterThan(-1);
  return /```ts\n([\s\S]*?)```/.exec(readme.slice(at))![1]!;
}

/** typeErrors type-checks `files` (name to source) as a project that installed @crm/client and the repository's packages, with tsc --strict; it answers tsc's output. */
function typeErrors(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), "crm-client-consumer-"));
  try {
    symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    const compilerOptions = { strict: true, noEmit: true, skipLibCheck: true, target: "ESNext", module: "Preserve", moduleResolution: "bundler", types: ["bun"], exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true, paths: { "@crm/client": [join(CLIENT_DIR, "index.d.ts")] } };
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, files: Object.keys(files) }));
    const result = Bun.spawnSync([process.execPath, join(ROOT, "node_modules/typescript/bin/tsc"), "-p", dir], { cwd: dir });
    return result.stdout.toString() + result.stderr.toString();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
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

  test("openapi-typescript's CLI, run in the repository's root on the document, writes schema.d.ts as the generator does", () => {
    const dir = mkdtempSync(join(tmpdir(), "crm-client-cli-"));
    try {
      const out = join(dir, "schema.d.ts");
      const result = Bun.spawnSync([process.execPath, join(ROOT, "node_modules/openapi-typescript/bin/cli.js"), "client/openapi.json", "-o", out], { cwd: ROOT });
      expect(result.stderr.toString()).not.toContain("missing");
      // The CLI writes a comment of its own first, as the generator does.
      const withoutComment = (types: string) => types.replace(/^(\/\*\*[\s\S]*?\*\/|\/\/[^\n]*)\n\n/, "");
      expect(withoutComment(readFileSync(out, "utf8"))).toBe(withoutComment(committed("schema.d.ts")));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  test("the README's example is client/example.ts, importing the package by name", () => {
    const readme = committed("README.md");
    const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBe(committed("example.ts").replace('from "./index.js"', 'from "@crm/client"'));
  });
});

describe("webhook receivers", () => {
  test("a receiver types the events it gets with the package's WebhookEvent: every kind, told apart by type; the README's receivers type-check with it", () => {
    const program = readmeBlock(join(ROOT, "README.md"), "A receiver in TypeScript");
    const handling = readmeBlock(join(ROOT, "README.md"), "So: drop an `event_id`");
    const imports = program.split("\n").filter((line) => line.startsWith("import "));
    const consumer = `import type { WebhookEvent, WebhookEventType } from "@crm/client";
export const kinds: Record<WebhookEventType, true> = { ${WEBHOOK_EVENT_TYPES.map((kind) => `"${kind}": true`).join(", ")} };
export function about(event: WebhookEvent): string {
  switch (event.type) {
    case "contact.deleted": return \`\${event.data.id} \${event.data.version} \${event.data.deleted_at}\`;
    case "delivery.exhausted": return event.data.subscription_id;
    default: return event.event_id;
  }
}
export const ping: WebhookEvent<"webhook.ping"> = { type: "webhook.ping", event_id: "evt_1", timestamp: "2026-11-29T10:00:00Z", data: { subscription_id: "sub_1" } };
`;
    const handle = `${imports.join("\n")}\ndeclare const db: any;\nexport async function handle(request: Request, body: string, webhook: Webhook): Promise<Response> {\n${handling}}\n`;
    expect(program).toContain('from "@crm/client"');
    expect(typeErrors({ "consumer.ts": consumer, "receiver.ts": program, "handle.ts": handle })).toBe("");
  }, 60_000);
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

  test("the README's Ajv formats compile every request schema in strict mode and agree with the server on addresses and domains", async () => {
    const dir = mkdtempSync(join(tmpdir(), "crm-client-ajv-"));
    try {
      symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
      writeFileSync(join(dir, "formats.ts"), `${readmeBlock(join(CLIENT_DIR, "README.md"), "validate a request before sending it")}\nexport { ajv };\n`);
      const { ajv } = await import(join(dir, "formats.ts"));
      const document = JSON.parse(committed("openapi.json"));
      const local = (schema: unknown) => JSON.parse(JSON.stringify(schema).replaceAll('"#/components/schemas/', '"components#/$defs/'));
      ajv.addSchema({ $id: "components", $defs: local(document.components.schemas) });
      const refused: string[] = [];
      for (const [path, item] of Object.entries(document.paths as Record<string, Record<string, any>>)) {
        for (const [method, op] of Object.entries(item)) {
          const parameters = (op.parameters ?? []).map((p: any) => (p.$ref ? p.$ref.split("/").slice(1).reduce((at: any, key: string) => at[key], document) : p));
          const schemas = [...parameters.map((p: any) => [p.name, p.schema]), ...Object.entries(op.requestBody?.content ?? {}).map(([type, c]: [string, any]) => [type, c.schema])];
          for (const [what, schema] of schemas) {
            try {
              ajv.compile(local(schema));
            } catch (error) {
              refused.push(`${method} ${path} ${what}: ${(error as Error).message}`);
            }
          }
        }
      }
      expect(refused).toEqual([]);
      const email = ajv.compile({ $ref: "components#/$defs/ContactInput/properties/email" });
      const domain = ajv.compile({ $ref: "components#/$defs/AccountInput/properties/domain" });
      const crm = createCrmClient({ baseUrl: server.url, token });
      const disagreements = [];
      for (const value of ["ada@example.com", "Ada.L+crm@Example.COM", "info@m\u00fcller.de", "j\u00fcrgen@example.com", "a@localhost", '"a b"@example.com', "a@[192.0.2.1]", "a@b_c.example", "a@-x.example", `${"a".repeat(64)}@${"b".repeat(185)}.example`, `${"a".repeat(64)}@${"\u00fc".repeat(60)}.de`]) {
        const { response } = await crm.POST("/public/v1/contacts", { body: { email: value } });
        if ((response.status === 201) !== email(value)) disagreements.push(`email ${value}: ${response.status}, Ajv ${email(value)}`);
      }
      for (const value of ["engines.example", "M\u00fcller.de", "localhost", "a..b", ".", "..", "-", "-a.com", "a-.com", "engines.example.", "engines.example..", "a_b.example", "m\u00fcller.de/x", "-m\u00fcller.de", "192.0.2.1", "1.example", "xn--zz.example", "xn--mller-kva.de", `${"l".repeat(63)}.example`, `${"l".repeat(64)}.example`, `${"l".repeat(240)}.example`, `${"\u00fc".repeat(60)}.de`, [63, 63, 63, 61].map((n) => "l".repeat(n)).join("."), [63, 63, 63, 62].map((n) => "l".repeat(n)).join(".")]) {
        const { response } = await crm.POST("/public/v1/accounts", { body: { name: "Probe", domain: value } });
        if ((response.status === 201) !== domain(value)) disagreements.push(`domain ${value}: ${response.status}, Ajv ${domain(value)}`);
      }
      expect(disagreements).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  test("GET /metrics through the client answers its text as the README says (loopback, no metrics token configured)", async () => {
    const crm = createCrmClient({ baseUrl: server.url, token });
    const call = readmeBlock(join(CLIENT_DIR, "README.md"), "ask openapi-fetch for text");
    const metrics = await new Function("crm", `return (async () => { ${call}; return metrics; })();`)(crm);
    expect(metrics).toContain("# TYPE ");
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
