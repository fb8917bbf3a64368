// The served OpenAPI document as a client generator and a linter see it. Every check walks all
// operations, so a new route is held to the same rules without touching this file.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createHarness, type Harness } from "../support/harness.ts";
import { dereference, documentValidator } from "../support/openapi.ts";
import { READ_ONLY_ACCOUNT_FIELDS } from "../../server/accounts/model.ts";
import { READ_ONLY_CONTACT_FIELDS } from "../../server/contacts/model.ts";
import { fingerprintSentBody } from "../../server/http/idempotent.ts";
import { canonicalJson } from "../../server/idempotency/service.ts";
import { LENGTH_COUNTING } from "../../server/limits/limits.ts";
import { PROBLEM_TYPES, problemTypeUrn } from "../../server/shared/problem.ts";
import { DELIVERY_STATUSES, SUBSCRIPTION_STATUSES } from "../../server/webhooks/model.ts";
import { VERSION } from "../../server/version.ts";

const ROOT = join(import.meta.dir, "..", "..");
let h: Harness;
let spec: any;

beforeAll(async () => {
  // Private targets allowed: a subscription can point at this machine (no name to resolve offline); the document is the same.
  h = await createHarness({ allowPrivateTargets: true });
  spec = (await h.json("GET", "/docs/json")).body;
});
afterAll(async () => await h.close());

interface Operation {
  where: string;
  path: string;
  method: string;
  op: any;
}

function operations(): Operation[] {
  return Object.entries(spec.paths as Record<string, any>).flatMap(([path, item]) =>
    Object.entries(item as Record<string, any>).map(([method, op]) => ({ where: `${method.toUpperCase()} ${path}`, path, method, op })),
  );
}

// What a JSON Schema 2020-12 (OpenAPI 3.1) schema may say; anything else is a keyword of the
// validator (TypeBox's error, noValidate...) that leaked into the document.
const STANDARD_KEYWORDS = new Set([
  "$ref", "type", "enum", "const", "format", "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
  "exclusiveMaximum", "multipleOf", "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "properties",
  "patternProperties", "additionalProperties", "propertyNames", "required", "minProperties", "maxProperties", "anyOf", "oneOf",
  "allOf", "not", "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
]);

/** nonStandardKeywords lists every keyword of `schema` and its sub-schemas that JSON Schema does not define, with where it is. */
function nonStandardKeywords(schema: any, where: string): string[] {
  if (!schema || typeof schema !== "object") return [];
  const found: string[] = [];
  for (const [keyword, value] of Object.entries(schema)) {
    if (!STANDARD_KEYWORDS.has(keyword)) found.push(`${where}/${keyword}`);
    else if (keyword === "properties" || keyword === "patternProperties") {
      for (const [name, sub] of Object.entries(value as object)) found.push(...nonStandardKeywords(sub, `${where}/${keyword}/${name}`));
    } else if (Array.isArray(value) && keyword !== "enum" && keyword !== "examples" && keyword !== "required") {
      value.forEach((sub, i) => found.push(...nonStandardKeywords(sub, `${where}/${keyword}/${i}`)));
    } else if (["items", "additionalProperties", "not", "contains", "propertyNames"].includes(keyword)) {
      found.push(...nonStandardKeywords(value, `${where}/${keyword}`));
    }
  }
  return found;
}

/** documentSchemas lists every schema of the document with where it is: components, parameters, bodies, responses, headers, of paths and webhooks. */
function documentSchemas(): [string, any][] {
  const schemas: [string, any][] = Object.entries(spec.components.schemas).map(([name, s]) => [`#/components/schemas/${name}`, s]);
  const content = (where: string, c: any) => Object.entries(c ?? {}).map(([type, media]: [string, any]) => [`${where} ${type}`, media.schema] as [string, any]);
  const webhooks = Object.entries((spec.webhooks ?? {}) as Record<string, any>).flatMap(([name, item]) => Object.entries(item as Record<string, any>).map(([method, op]) => ({ where: `webhook ${name} ${method}`, op })));
  for (const { where, op } of [...operations(), ...webhooks]) {
    for (const p of op.parameters ?? []) schemas.push([`${where} parameter ${p.name}`, p.schema]);
    schemas.push(...content(`${where} body`, op.requestBody?.content));
    for (const [status, r] of Object.entries(op.responses ?? {}) as [string, any][]) {
      schemas.push(...content(`${where} ${status}`, r.content));
      for (const [name, header] of Object.entries(r.headers ?? {}) as [string, any][]) schemas.push([`${where} ${status} header ${name}`, header.schema]);
    }
  }
  return schemas;
}

describe("OpenAPI document for client generators", () => {
  test("every operation has a unique, readable operationId: a verb and a noun in camelCase", () => {
    const ids = operations().map(({ where, op }) => [where, op.operationId]);
    const unreadable = ids.filter(([, id]) => typeof id !== "string" || !/^[a-z]+(?:[A-Z][a-z0-9]+)+$/.test(id) || /PublicV1|By[A-Z]/.test(id));
    expect(unreadable).toEqual([]);
    const seen = ids.map(([, id]) => id);
    expect(seen.filter((id, i) => seen.indexOf(id) !== i)).toEqual([]);
  });

  test("the operations of the contacts API are named as a client reads them", () => {
    const byRoute = Object.fromEntries(operations().map(({ where, op }) => [where, op.operationId]));
    expect(byRoute).toMatchObject({
      "POST /public/v1/contacts": "createContact",
      "GET /public/v1/contacts": "listContacts",
      "GET /public/v1/contacts/{id}": "getContact",
      "PATCH /public/v1/contacts/{id}": "updateContact",
      "DELETE /public/v1/contacts/{id}": "deleteContact",
      "POST /public/v1/accounts": "createAccount",
      "GET /public/v1/users": "listUsers",
      "GET /healthz": "getHealth",
    });
  });

  test("no schema carries a keyword JSON Schema does not define", () => {
    expect(documentSchemas().flatMap(([where, schema]) => nonStandardKeywords(schema, where))).toEqual([]);
  });

  test("the checker finds leaked validator keywords, also inside properties and unions", () => {
    const leaky = { type: "object", properties: { error: { type: "string", error: "x" }, n: { anyOf: [{ type: "string", noValidate: true }] } }, noValidate: true };
    expect(nonStandardKeywords(leaky, "s")).toEqual(["s/properties/error/error", "s/properties/n/anyOf/0/noValidate", "s/noValidate"]);
  });

  test("every operation states its security: a bearer token, or none (security: []) on the health probes", () => {
    const security = Object.fromEntries(operations().map(({ where, op }) => [where, op.security]));
    expect(Object.entries(security).filter(([, s]) => !Array.isArray(s))).toEqual([]);
    expect([security["GET /healthz"], security["GET /readyz"]]).toEqual([[], []]);
    for (const { where, path } of operations()) if (path.startsWith("/public/v1")) expect([where, security[where]]).toEqual([where, [{ bearerAuth: [] }]]);
  });

  test("every tag an operation or a webhook uses is declared once in the top-level tags, with a description, and none other", () => {
    const used = new Set([...operations(), ...Object.values(spec.webhooks as Record<string, any>).flatMap((item) => Object.values(item))].flatMap((o: any) => (o.op ?? o).tags ?? []));
    const declared = (spec.tags ?? []).map((tag: any) => tag.name);
    expect([...declared].sort()).toEqual([...used].sort());
    expect(new Set(declared).size).toBe(declared.length);
    expect((spec.tags ?? []).filter((tag: any) => typeof tag.description !== "string" || tag.description.length < 20)).toEqual([]);
  });

  test("servers names this server", () => {
    expect(spec.servers).toEqual([{ url: "/", description: "This server" }]);
  });

  test("the shared shapes are named once in components.schemas and referenced", () => {
    const named = Object.keys(spec.components.schemas);
    expect(named).toEqual(expect.arrayContaining(["Problem", "ListMeta", "Contact", "ContactInput", "Account", "User", "Subscription", "Delivery"]));
    const text = JSON.stringify(spec.paths);
    expect(named.filter((name) => !text.includes(`"#/components/schemas/${name}"`) && !JSON.stringify(spec.components).includes(`"#/components/schemas/${name}"`))).toEqual([]);
    const body = (where: string, status: string) => operations().find((o) => o.where === where)!.op.responses[status].content["application/json"].schema;
    expect(body("POST /public/v1/contacts", "201").properties.data).toEqual({ $ref: "#/components/schemas/Contact" });
    expect(body("GET /public/v1/contacts", "200").properties).toEqual({ data: { type: "array", items: { $ref: "#/components/schemas/Contact" } }, meta: { $ref: "#/components/schemas/ListMeta" } });
    expect(spec.components.schemas.Contact.properties.accounts.items).toEqual({ $ref: "#/components/schemas/Account" });
  });

  test("every error answer is a problem document: application/problem+json referencing Problem", () => {
    const wrong: string[] = [];
    for (const { where, op } of operations()) {
      for (const [status, documented] of Object.entries(op.responses) as [string, any][]) {
        if (Number(status) < 400) continue;
        const content = dereference(spec, documented).content;
        if (JSON.stringify(content) !== JSON.stringify({ "application/problem+json": { schema: { $ref: "#/components/schemas/Problem" } } })) wrong.push(`${where} ${status}`);
      }
    }
    expect(wrong).toEqual([]);
    expect(spec.components.schemas.Problem.required).toEqual(["type", "title", "status", "detail"]);
  });

  // A generated client then types `type` as the union of the URNs plus string: it can switch on the known ones and still read a new one.
  test("Problem.type lists every problem type the service sends, the README's table's, and any other string for the types added later", () => {
    expect(spec.components.schemas.Problem.properties.type).toEqual({
      anyOf: [{ type: "string", enum: PROBLEM_TYPES.map(problemTypeUrn) }, { type: "string", description: "A value added after this document was generated: handle it as unknown." }],
      description: "URN naming the error kind; README's Problem types table says what each means and what to do. New types may be added: handle one you do not know by its status.",
    });
  });

  test("page and per_page are integers wherever a list takes them", () => {
    const params = operations().flatMap(({ where, op }) => (op.parameters ?? []).filter((p: any) => p.name === "page" || p.name === "per_page").map((p: any) => [where, p.name, p.schema.type]));
    expect(params.length).toBeGreaterThanOrEqual(10);
    expect(params.filter(([, , type]) => type !== "integer")).toEqual([]);
  });

  test("numbers in bodies are numbers: no string-or-integer left from query coercion", () => {
    const text = JSON.stringify(spec);
    expect(text).not.toContain('"format":"integer"');
    expect(text).not.toContain('"format":"numeric"');
    expect(spec.components.schemas.Delivery.properties.attempts.type).toBe("integer");
  });

  test("a nullable field keeps the description its route's schema gives it, over the description of the type it makes nullable", () => {
    const patch = spec.paths["/public/v1/webhook-subscriptions/{subscriptionId}"].patch.requestBody.content["application/json"].schema;
    expect(dereference(spec, patch).properties.max_rate).toEqual({
      description: "The receiver's cap in requests per second; null removes it. The delivery loop uses the new cap from its next attempt on.",
      multipleOf: 1,
      minimum: 1,
      maximum: 1000,
      type: ["number", "null"],
    });
    // Without a description of its own, the field keeps the type's.
    expect(spec.components.schemas.SubscriptionInput.properties.max_rate.description).toBe(
      "Requests per second this receiver gets at most (1 to 1000), retries and recoveries included; attempts are spaced evenly. Without it, no cap beyond the delivery loop's concurrency.",
    );
  });

  test("every /public/v1 response (a 304 Not Modified, errors and default too) declares the RateLimit and RateLimit-Policy headers, no other path's does, and a real success carries them", async () => {
    const missing: string[] = [];
    const stray: string[] = [];
    for (const { where, path, op } of operations()) {
      for (const [status, response] of Object.entries(op.responses) as [string, any][]) {
        const headers = dereference(spec, response).headers ?? {};
        const declared = Boolean(headers.RateLimit && headers["RateLimit-Policy"]);
        if (path.startsWith("/public/v1") && !declared) missing.push(`${where} ${status}`);
        if (!path.startsWith("/public/v1") && (headers.RateLimit || headers["RateLimit-Policy"])) stray.push(`${where} ${status}`);
      }
    }
    expect([missing, stray]).toEqual([[], []]);
    const res = await h.request("GET", "/public/v1/contacts");
    expect(res.status).toBe(200);
    expect(res.headers.get("ratelimit")).toMatch(/^"read";r=\d+;t=\d+$/);
    expect(res.headers.get("ratelimit-policy")).toMatch(/^"read";q=\d+;w=\d+$/);
  });
});

/** redoclyLint lints a document with the Redocly CLI and the repository's redocly.yaml; it answers the JSON report and the exit code. */
function redoclyLint(document: unknown): { problems: any[]; totals: { errors: number }; exitCode: number } {
  const dir = mkdtempSync(join(tmpdir(), "crm-lint-"));
  try {
    const file = join(dir, "openapi.json");
    writeFileSync(file, JSON.stringify(document));
    // Node when there is one (a machine with npm has it), else Bun, which runs the CLI too.
    const runtime = Bun.which("node") ?? process.execPath;
    const result = Bun.spawnSync([runtime, join(ROOT, "node_modules", "@redocly", "cli", "bin", "cli.js"), "lint", file, "--config", join(ROOT, "redocly.yaml"), "--format=json"], {
      cwd: ROOT,
      env: { ...process.env, REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", REDOCLY_TELEMETRY: "off" },
    });
    return { ...JSON.parse(result.stdout.toString()), exitCode: result.exitCode };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const errorsOf = (report: { problems: any[] }) => report.problems.filter((p) => p.severity === "error");

describe("OpenAPI document is stable", () => {
  test("it is the same whether routes were called before it was built or not (in a fresh process)", async () => {
    // Elysia changes a route's schemas when the route first runs; a process that has served nothing yet shows whether the document depends on that.
    const script = `
      import { createHarness } from ${JSON.stringify(join(ROOT, "test/support/harness.ts"))};
      const before = await createHarness();
      const first = JSON.stringify((await before.json("GET", "/docs/json")).body);
      await before.close();
      const after = await createHarness();
      await after.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } });
      await after.json("GET", "/healthz");
      await after.json("GET", "/public/v1/contacts/con_x");
      const second = JSON.stringify((await after.json("GET", "/docs/json")).body);
      await after.close();
      console.log(first === second ? "same" : "different");`;
    // On SQLite whatever CRM_TEST_BACKEND says: the document comes from the routes alone, and a plain
    // `bun -e` has no teardown preload (test/support/teardown.ts) to stop the PostgreSQL test server it
    // would start, whose process and connection then keep it running past its last line.
    const child = Bun.spawn([process.execPath, "-e", script], { cwd: ROOT, stdout: "pipe", stderr: "pipe", env: { ...process.env, CRM_TEST_BACKEND: "sqlite" } });
    const [stdout, stderr] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text()]);
    expect([await child.exited, stderr]).toEqual([0, expect.any(String)]);
    expect(stdout.trim().split("\n").at(-1)).toBe("same"); // the last line: libraries may print before it

  }, 60_000);
});

describe("Redocly lint", () => {
  test("the served document has no error under Redocly's recommended rules", () => {
    const report = redoclyLint(spec);
    expect(errorsOf(report).map((p) => `${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`)).toEqual([]);
    expect(report.totals.errors).toBe(0);
    expect(report.exitCode).toBe(0);
  }, 60_000);

  test("the lint fails a document with a leaked keyword and an operation without security", () => {
    const broken = structuredClone(spec);
    delete broken.paths["/healthz"].get.security;
    broken.components.schemas.Contact.properties.email.error = "must be an email";
    const report = redoclyLint(broken);
    expect([...new Set(errorsOf(report).map((p) => p.ruleId))].sort()).toEqual(["security-defined", "struct"]);
    expect(report.exitCode).not.toBe(0);
  }, 60_000);
});

describe("answers as documented: statuses and headers the HTTP conventions add", () => {
  /** HEADERS_TO_DECLARE are the response headers a client generated from the document needs typed: each sent must be declared. */
  const HEADERS_TO_DECLARE = ["etag", "idempotent-replayed", "location", "retry-after", "www-authenticate", "ratelimit", "ratelimit-policy", "x-request-id"];

  /** localSubscription creates a subscription to a port of this machine. */
  const localSubscription = async () => (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://127.0.0.1:9/crm", events: ["contact.created"] } })).body.data;

  /** undocumented lists what `response` to `method path` (path as the document writes it) shows that the document does not state. */
  function undocumented(method: string, path: string, response: { status: number; headers: Headers }, sentHeaders: string[] = []): string[] {
    const op = spec.paths[path]?.[method.toLowerCase()];
    const where = `${method} ${path} ${response.status}`;
    const documented = op?.responses[String(response.status)];
    if (!documented) return [`${where}: status not documented`];
    const declared = Object.keys(dereference(spec, documented).headers ?? {}).map((name) => name.toLowerCase());
    const parameters = (op.parameters ?? []).map((p: any) => dereference(spec, p)).filter((p: any) => p.in === "header").map((p: any) => p.name.toLowerCase());
    return [
      ...HEADERS_TO_DECLARE.filter((name) => response.headers.has(name) && !declared.includes(name)).map((name) => `${where}: header ${name} not declared`),
      ...sentHeaders.filter((name) => !parameters.includes(name)).map((name) => `${where}: request header ${name} not a parameter`),
    ];
  }

  test("versions, reads not modified, replays, unversioned If-Match, missing tokens, bad request targets and bodies where none is read", async () => {
    const answers: string[] = [];
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" }, headers: { "idempotency-key": "documented-1" } });
    const replayed = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" }, headers: { "idempotency-key": "documented-1" } });
    expect([created.status, replayed.status, replayed.headers.get("idempotent-replayed"), created.headers.get("etag")]).toEqual([201, 201, "true", '"1"']);
    answers.push(...undocumented("POST", "/public/v1/contacts", created, ["idempotency-key"]), ...undocumented("POST", "/public/v1/contacts", replayed));
    const id = created.body.data.id;
    answers.push(...undocumented("GET", "/public/v1/contacts/{id}", await h.request("GET", `/public/v1/contacts/${id}`)));
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data.id;
    const currentContact = await h.request("GET", `/public/v1/contacts/${id}`, { headers: { "if-none-match": '"1"' } });
    const currentAccount = await h.request("GET", `/public/v1/accounts/${account}`, { headers: { "if-none-match": "*" } });
    expect([currentContact.status, currentContact.headers.get("etag"), currentAccount.status]).toEqual([304, '"1"', 304]);
    answers.push(...undocumented("GET", "/public/v1/contacts/{id}", currentContact, ["if-none-match"]), ...undocumented("GET", "/public/v1/accounts/{id}", currentAccount, ["if-none-match"]));
    const stalePatch = await h.request("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Grace" }, headers: { "if-match": '"9"' } });
    const staleDelete = await h.request("DELETE", `/public/v1/contacts/${id}`, { headers: { "if-match": '"9"' } });
    const currentTag = await h.request("POST", `/public/v1/contacts/${id}/tags`, { body: { tag: "vip" }, headers: { "if-none-match": '"1"' } });
    expect([stalePatch.status, staleDelete.status, staleDelete.headers.get("etag"), currentTag.status]).toEqual([412, 412, '"1"', 412]);
    answers.push(...undocumented("PATCH", "/public/v1/contacts/{id}", stalePatch, ["if-match"]), ...undocumented("DELETE", "/public/v1/contacts/{id}", staleDelete, ["if-match"]));
    answers.push(...undocumented("POST", "/public/v1/contacts/{id}/tags", currentTag, ["if-none-match"]));

    const user = (await h.json("POST", "/public/v1/users", { body: { name: "Grace Hopper", email: "grace@example.com" } })).body.data;
    const userWrite = await h.request("PATCH", `/public/v1/users/${user.id}`, { body: { name: "Grace" }, headers: { "if-match": '"1"' } });
    const subscription = await localSubscription();
    const enable = await h.request("POST", `/public/v1/webhook-subscriptions/${subscription.id}/enable`, { headers: { "if-match": '"1"' } });
    const existingRemoval = await h.request("DELETE", `/public/v1/webhook-subscriptions/${subscription.id}`, { headers: { "if-none-match": "*" } });
    expect([userWrite.status, enable.status, existingRemoval.status]).toEqual([412, 412, 412]);
    // Reads ignore If-Match, so none documents it or a 412.
    const userRead = await h.request("GET", `/public/v1/users/${user.id}`, { headers: { "if-match": '"1"' } });
    expect(userRead.status).toBe(200);
    const readsWithIfMatch = Object.entries(spec.paths as Record<string, any>)
      .filter(([, item]) => item.get && (item.get.responses["412"] || (item.get.parameters ?? []).some((p: any) => p.name === "if-match")))
      .map(([path]) => path);
    expect(readsWithIfMatch).toEqual([]);
    answers.push(...undocumented("PATCH", "/public/v1/users/{id}", userWrite, ["if-match"]), ...undocumented("POST", "/public/v1/webhook-subscriptions/{subscriptionId}/enable", enable, ["if-match"]));
    answers.push(...undocumented("DELETE", "/public/v1/webhook-subscriptions/{subscriptionId}", existingRemoval, ["if-none-match"]));

    const invalid = await h.request("POST", "/public/v1/contacts", { body: {}, headers: { "x-request-id": "import-42.row:7" } });
    const missing = await h.request("GET", "/public/v1/contacts/con_missing");
    expect([invalid.status, invalid.headers.get("x-request-id"), missing.status]).toEqual([422, "import-42.row:7", 404]);
    answers.push(...undocumented("POST", "/public/v1/contacts", invalid, ["x-request-id"]), ...undocumented("GET", "/public/v1/contacts/{id}", missing));
    const noToken = await h.request("GET", "/public/v1/contacts", { headers: { authorization: "" } });
    const badTarget = await h.request("GET", "/public/v1/contacts/%zz");
    const textBody = await h.request("DELETE", `/public/v1/contacts/${id}`, { body: "x", headers: { "content-type": "text/plain" } });
    expect([noToken.status, badTarget.status, textBody.status]).toEqual([401, 400, 415]);
    answers.push(...undocumented("GET", "/public/v1/contacts", noToken), ...undocumented("GET", "/public/v1/contacts/{id}", badTarget), ...undocumented("DELETE", "/public/v1/contacts/{id}", textBody));
    expect(answers).toEqual([]);
  });

  test("the ETag of every versioned answer says where to send it back: If-Match to write that version, If-None-Match to read it again only if it changed", async () => {
    const described = Object.entries(spec.paths as Record<string, any>).flatMap(([path, item]) =>
      Object.entries(item as Record<string, any>).flatMap(([method, op]) =>
        Object.entries((op.responses ?? {}) as Record<string, any>)
          .filter(([status]) => /^2\d\d$/.test(status))
          .flatMap(([status, response]) => {
            const etag = dereference(spec, response).headers?.ETag;
            return etag ? [`${method} ${path} ${status}: ${etag.description}`] : [];
          }),
      ),
    );
    const words = 'The resource\'s version as a strong entity tag ("3"): send it back in If-Match to write only that version, or in If-None-Match to read it again only if it changed (304 Not Modified otherwise).';
    expect(described.length).toBe(10);
    // A contact read with include embeds relations whose changes its version does not follow, and says so.
    expect(described.filter((line) => !line.endsWith(`: ${words}`))).toEqual([`get /public/v1/contacts/{id} 200: ${words} Not sent when include embeds relations.`]);
    const embedded = await h.json("POST", "/public/v1/contacts", { body: { email: "etag-include@example.com" } });
    const withInclude = await h.request("GET", `/public/v1/contacts/${embedded.body.data.id}?include=accounts`);
    expect([withInclude.status, withInclude.headers.get("etag")]).toEqual([200, null]);
    // As said: the ETag of a write, sent back in If-None-Match, reads nothing new.
    const created = await h.json("POST", "/public/v1/accounts", { body: { name: "Initech" } });
    const renamed = await h.request("PATCH", `/public/v1/accounts/${created.body.data.id}`, { body: { name: "Initrode" }, headers: { "if-match": created.headers.get("etag")! } });
    const reread = await h.request("GET", `/public/v1/accounts/${created.body.data.id}`, { headers: { "if-none-match": renamed.headers.get("etag")! } });
    expect([renamed.status, reread.status]).toEqual([200, 304]);
  });

  test("the probes and /metrics state the answers the limits guard gives on any path, and /metrics its 401's WWW-Authenticate", async () => {
    const badTarget = await h.request("GET", "/healthz?a=%zz");
    const longQuery = await h.request("GET", `/readyz?a=${"x".repeat(5000)}`);
    h.rt.config.metricsToken = "metrics-token-for-the-test";
    try {
      const unauthorized = await h.request("GET", "/metrics", { headers: { authorization: "" } });
      expect([badTarget.status, longQuery.status, unauthorized.status, unauthorized.headers.get("www-authenticate")]).toEqual([400, 414, 401, 'Bearer realm="metrics"']);
      expect([...undocumented("GET", "/healthz", badTarget), ...undocumented("GET", "/readyz", longQuery), ...undocumented("GET", "/metrics", unauthorized)]).toEqual([]);
    } finally {
      h.rt.config.metricsToken = "";
    }
  });

  test("what the service checks itself is stated too: an optional body, the Idempotency-Key's length and characters, custom_fields and consent as objects, read-only fields refused", async () => {
    const rotate = spec.paths["/public/v1/webhook-subscriptions/{subscriptionId}/rotate-secret"].post;
    const subscription = await localSubscription();
    expect([rotate.requestBody.required, (await h.request("POST", `/public/v1/webhook-subscriptions/${subscription.id}/rotate-secret`)).status]).toEqual([false, 200]);
    const key = spec.paths["/public/v1/contacts"].post.parameters.find((p: any) => p.name === "idempotency-key").schema;
    expect([key.minLength, key.maxLength]).toEqual([1, 255]);
    // Its characters as the service takes them: printable ASCII but the comma (two keys joined by Bun).
    expect(["order 42/#1!~", "A, B", "A,B", "caf\u00e9", "a\tb"].map((k) => new RegExp(key.pattern).test(k))).toEqual([true, false, false, false, false]);
    const input = spec.components.schemas.ContactInput.properties;
    expect([input.custom_fields.type, input.consent.type]).toEqual([["object", "null"], ["object", "null"]]);
    // Read-only fields are refused with 422 "is read-only": the inputs declare them false.
    const refused = (properties: Record<string, unknown>) => Object.keys(properties).filter((name) => properties[name] === false);
    expect(refused(input)).toEqual([...READ_ONLY_CONTACT_FIELDS]);
    expect(refused(spec.components.schemas.AccountInput.properties)).toEqual([...READ_ONLY_ACCOUNT_FIELDS]);
    const accountPatch = dereference(spec, spec.paths["/public/v1/accounts/{id}"].patch.requestBody.content["application/json"].schema);
    expect(refused(accountPatch.properties)).toEqual([...READ_ONLY_ACCOUNT_FIELDS]);
    const subscriptionPatch = dereference(spec, spec.paths["/public/v1/webhook-subscriptions/{subscriptionId}"].patch.requestBody.content["application/json"].schema);
    expect(refused(subscriptionPatch.properties)).toEqual(["target_url", "events"]);
    const readOnly = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", id: "con_mine" } });
    expect([readOnly.status, readOnly.body.errors]).toEqual([422, [{ pointer: "/id", detail: "is read-only" }]]);
  });

  test("If-Match and If-None-Match state, wherever taken, the entity tags the service reads: a validator refuses what the service answers 422", async () => {
    const conditions = operations().flatMap(({ where, op }) =>
      (op.parameters ?? []).map((p: any) => dereference(spec, p)).filter((p: any) => p.in === "header" && /^if-(none-)?match$/.test(p.name)).map((p: any) => ({ where: `${where} ${p.name}`, schema: p.schema })),
    );
    expect(conditions.filter(({ schema }) => typeof schema.pattern !== "string").map(({ where }) => where)).toEqual([]);
    const patterns = [...new Set(conditions.map(({ schema }) => schema.pattern))];
    expect(patterns.length).toBe(1);
    const pattern = new RegExp(patterns[0], "u");
    const id = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    const values = ['"1"', 'W/"1"', "*", " * ", '"1", "2"', '"1",', ', "2"', '"9", , W/"1"', "1", "", ",", " , ", '"1', '*, "1"', '"a,b"', 'W/ "1"', 'w/"1"', '"1" "2"'];
    const disagreements = [];
    for (const value of values) {
      // A read answers 422 for what is not entity tags, and the document says no more of a read than of a write.
      const read = await h.request("GET", `/public/v1/contacts/${id}`, { headers: { "if-none-match": value } });
      const write = await h.request("PATCH", `/public/v1/contacts/${id}`, { body: { last_name: "Lovelace" }, headers: { "if-match": value } });
      for (const [what, status] of [["read If-None-Match", read.status], ["write If-Match", write.status]] as const) {
        if ((status === 422) === pattern.test(value)) disagreements.push(`${what} ${JSON.stringify(value)}: ${status}, pattern ${pattern.test(value) ? "takes" : "refuses"} it`);
      }
    }
    expect(disagreements).toEqual([]);
  });

  test("the tag filter states what the service refuses: an empty list item, a tag over 100 characters", async () => {
    const tag = spec.paths["/public/v1/contacts"].get.parameters.map((p: any) => dereference(spec, p)).find((p: any) => p.name === "tag").schema;
    const pattern = new RegExp(tag.pattern, "u");
    const long = "x".repeat(100);
    const disagreements = [];
    for (const value of ["vip", "vip,churned", "a b/c", ",vip", "vip,", "a,,b", ",", long, `${long}x`, `vip,${long}x`, `${long},${long}`]) {
      const status = (await h.request("GET", `/public/v1/contacts?tag=${encodeURIComponent(value)}`)).status;
      if ((status === 422) === pattern.test(value)) disagreements.push(`${JSON.stringify(value)}: ${status}, pattern ${pattern.test(value) ? "takes" : "refuses"} it`);
    }
    expect(disagreements).toEqual([]);
  });

  test("every POST taking an Idempotency-Key documents the 409 of a key still in use, with Retry-After", () => {
    const missing = operations()
      .filter(({ op }) => (op.parameters ?? []).some((p: any) => p.in === "header" && p.name === "idempotency-key"))
      .filter(({ op }) => !op.responses["409"]?.headers?.["Retry-After"])
      .map(({ where }) => where);
    expect(missing).toEqual([]);
  });

  test("every POST documenting an Idempotency-Key, and no other route, fingerprints the body as sent (its key's check reads it; a GET pays nothing)", () => {
    const documented = operations()
      .filter(({ op }) => (op.parameters ?? []).some((p: any) => p.in === "header" && p.name === "idempotency-key"))
      .map(({ method, path }) => `${method.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`)
      .sort();
    const fingerprinting = h.app.routes
      .filter((route) => ((route.hooks as { transform?: { fn: unknown }[] }).transform ?? []).some((hook) => hook.fn === fingerprintSentBody))
      .map((route) => `${route.method} ${route.path}`)
      .sort();
    expect(documented).toContain("POST /public/v1/contacts/batch");
    expect(fingerprinting).toEqual(documented);
  });
});

/** responseSchemas lists the schema of every response body of the paths, with where it is. */
function responseSchemas(): [string, any][] {
  return operations().flatMap(({ where, op }) =>
    Object.entries(op.responses as Record<string, any>).flatMap(([status, response]) =>
      Object.entries(dereference(spec, response).content ?? {}).map(([type, media]: [string, any]) => [`${where} ${status} ${type}`, media.schema] as [string, any]),
    ),
  );
}

/** closedEnums lists every enum reachable from `schema` (through components) that no sibling branch of any string opens, with where it is. */
function closedEnums(schema: any, where: string, seen = new Set<any>()): string[] {
  if (!schema || typeof schema !== "object" || seen.has(schema)) return [];
  seen.add(schema);
  if (typeof schema.$ref === "string") return closedEnums(dereference(spec, schema), schema.$ref, seen);
  const found: string[] = schema.enum ? [where] : [];
  const opensEnums = Array.isArray(schema.anyOf) && schema.anyOf.some((branch: any) => branch.type === "string" && !branch.enum && branch.const === undefined);
  for (const [keyword, value] of Object.entries(schema)) {
    if (keyword === "anyOf" && opensEnums) {
      (value as any[]).forEach((branch, i) => found.push(...closedEnums(branch.enum ? { ...branch, enum: undefined } : branch, `${where}/anyOf/${i}`, seen)));
    } else if (keyword === "properties" || keyword === "patternProperties") {
      for (const [name, sub] of Object.entries(value as object)) found.push(...closedEnums(sub, `${where}/${keyword}/${name}`, seen));
    } else if (Array.isArray(value) && ["anyOf", "oneOf", "allOf", "prefixItems"].includes(keyword)) {
      value.forEach((sub, i) => found.push(...closedEnums(sub, `${where}/${keyword}/${i}`, seen)));
    } else if (["items", "additionalProperties", "not", "contains", "propertyNames"].includes(keyword)) {
      found.push(...closedEnums(value, `${where}/${keyword}`, seen));
    }
  }
  return found;
}

describe("OpenAPI document as a contract that grows", () => {
  test("every enumeration in an answer is open: its values, then any string, so a client generated today still reads a value added later", () => {
    expect(responseSchemas().flatMap(([where, schema]) => closedEnums(schema, where))).toEqual([]);
    const open = (values: readonly string[]) => [{ type: "string", enum: [...values] }, { type: "string", description: "A value added after this document was generated: handle it as unknown." }];
    const schemas = spec.components.schemas;
    const stats = dereference(spec, spec.paths["/public/v1/webhook-subscriptions/{subscriptionId}/stats"].get.responses["200"].content["application/json"].schema).properties.data;
    expect([schemas.Subscription.properties.status.anyOf, schemas.Delivery.properties.status.anyOf, schemas.Attempt.properties.trigger.anyOf, dereference(spec, stats).properties.status.anyOf]).toEqual([
      open(SUBSCRIPTION_STATUSES),
      open(DELIVERY_STATUSES),
      open(["scheduled", "manual"]),
      open(SUBSCRIPTION_STATUSES),
    ]);
  });

  test("a client validating with the document reads answers holding a value added later, and a request's enumerations stay closed as the service checks them", async () => {
    const validate = documentValidator(spec);
    const missing = await h.json("GET", "/public/v1/contacts/con_missing");
    const subscription = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://127.0.0.1:9/crm", events: ["contact.created"] } })).body.data;
    expect([missing.status, validate(spec.components.schemas.Problem, missing.body), validate(spec.components.schemas.Subscription, subscription)]).toEqual([404, [], []]);
    expect(validate(spec.components.schemas.Problem, { ...missing.body, type: "urn:crm:problem:added-later" })).toEqual([]);
    expect(validate(spec.components.schemas.Subscription, { ...subscription, status: "archived" })).toEqual([]);
    const refusedKind = { target_url: "https://example.com/hooks", events: ["contact.merged"] };
    const refused = await h.json("POST", "/public/v1/webhook-subscriptions", { body: refusedKind });
    expect([refused.status, validate(spec.components.schemas.SubscriptionInput, refusedKind).length > 0]).toEqual([422, true]);
    const statusFilter = spec.paths["/public/v1/webhook-deliveries"].get.parameters.find((p: any) => p.name === "status").schema;
    expect([validate(statusFilter, "failed"), validate(statusFilter, "archived").length > 0]).toEqual([[], true]);
  });

  test("info.version changes whenever the contract does: the package version, then a hash of everything in the document but info", () => {
    const hashOf = (document: any) => {
      const { info: _, ...contract } = document;
      return `${VERSION}+${new Bun.CryptoHasher("sha256").update(canonicalJson(contract)).digest("hex").slice(0, 12)}`;
    };
    expect(spec.info.version).toBe(hashOf(spec));
    const grown = structuredClone(spec);
    grown.components.schemas.Subscription.properties.status.anyOf[0].enum.push("archived");
    const renamed = structuredClone(spec);
    renamed.info.description = "Another title block";
    expect([hashOf(grown) === spec.info.version, hashOf(renamed) === spec.info.version]).toEqual([false, true]);
  });

  test("every operation has a default response, a problem with the request id, for a 500 internal and a 503 it does not list; a real 500 is what it says", async () => {
    const problem = { "application/problem+json": { schema: { $ref: "#/components/schemas/Problem" } } };
    const defaults = operations().map(({ where, op }) => {
      const response = op.responses.default && dereference(spec, op.responses.default);
      return [where, JSON.stringify(response?.content) === JSON.stringify(problem), Boolean(response?.headers?.["X-Request-Id"])];
    });
    expect(defaults.filter(([, content, requestId]) => !content || !requestId)).toEqual([]);
    // A table gone under the running server stands in for any failure no status names.
    const broken = await createHarness();
    try {
      await broken.rt.db.run("ALTER TABLE users RENAME TO users_gone");
      const failed = await broken.request("GET", "/public/v1/users");
      const body = (await failed.json()) as any;
      const operation = spec.paths["/public/v1/users"].get;
      const documented = dereference(spec, operation.responses[String(failed.status)] ?? operation.responses.default);
      expect([failed.status >= 500, failed.headers.get("content-type"), documentValidator(spec)(spec.components.schemas.Problem, body)]).toEqual([true, "application/problem+json", []]);
      const sent = ["ratelimit", "ratelimit-policy", "x-request-id"].filter((name) => failed.headers.has(name));
      expect(sent.filter((name) => !Object.keys(documented.headers).some((declared) => declared.toLowerCase() === name))).toEqual([]);
      expect(sent).toContain("x-request-id");
    } finally {
      await broken.close();
    }
  });

  test("the Problem schema types the extension members README tells clients to use, and real problems carry no member it does not name", async () => {
    const members = spec.components.schemas.Problem.properties;
    const described = Object.fromEntries(["current_version", "retained_since", "subscription_id", "contact_id", "account_id", "user_id", "checks"].map((name) => [name, members[name]?.description?.split(" ")[0]]));
    expect(described).toEqual({
      current_version: "precondition-failed",
      retained_since: "deletions-expired",
      subscription_id: "replay-secret-lost",
      contact_id: "replay-resource-deleted",
      account_id: "replay-resource-deleted",
      user_id: "replay-resource-deleted",
      checks: "not-ready",
    });
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" }, headers: { "idempotency-key": "members-1" } });
    const stale = await h.json("PATCH", `/public/v1/contacts/${created.body.data.id}`, { body: { first_name: "Grace" }, headers: { "if-match": '"9"' } });
    expect((await h.request("DELETE", `/public/v1/contacts/${created.body.data.id}`)).status).toBe(204);
    const replayed = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" }, headers: { "idempotency-key": "members-1" } });
    const expired = await h.json("GET", "/public/v1/contacts/deleted?since=2000-01-01T00:00:00Z");
    const answers = [stale, replayed, expired].map((answer) => [answer.status, answer.body.type]);
    expect(answers).toEqual([
      [412, "urn:crm:problem:precondition-failed"],
      [410, "urn:crm:problem:replay-resource-deleted"],
      [410, "urn:crm:problem:deletions-expired"],
    ]);
    const validate = documentValidator(spec);
    const unnamed = [stale, replayed, expired].flatMap((answer) => Object.keys(answer.body).filter((name) => !(name in members)).map((name) => `${answer.body.type} ${name}`));
    expect([unnamed, ...[stale, replayed, expired].map((answer) => validate(spec.components.schemas.Problem, answer.body))]).toEqual([[], [], [], []]);
  });

  test("every limited string says how its length is counted, as README's Limits and a 422 at the bound do: UTF-16 code units, an astral character counting as two", async () => {
    const unsaid = documentSchemas().flatMap(([where, schema]) => limitedStrings(schema, where)).filter(([, description]) => !description?.endsWith(`Length ${LENGTH_COUNTING}.`));
    expect(unsaid).toEqual([]);
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const limits = readme.slice(readme.indexOf("\n## Limits\n"), readme.indexOf("\n| limit |", readme.indexOf("\n## Limits\n"))).replace(/\s+/g, " ");
    expect(limits.includes(LENGTH_COUNTING) ? "README's Limits says it" : limits).toBe("README's Limits says it");
    // 100 emoji are 200 code units: at the bound. One more character is over it, though a validator counting code points takes 101.
    const atBound = await h.json("POST", "/public/v1/contacts", { body: { first_name: "\u{1F600}".repeat(100) } });
    const over = await h.json("POST", "/public/v1/contacts", { body: { first_name: `${"\u{1F600}".repeat(100)}a` } });
    const overBmp = await h.json("POST", "/public/v1/contacts", { body: { first_name: "a".repeat(201) } });
    expect([atBound.status, over.status, over.body.errors, overBmp.body.errors]).toEqual([
      201,
      422,
      [{ pointer: "/first_name", detail: `must be a string of at most 200 characters, or null (${LENGTH_COUNTING})` }],
      [{ pointer: "/first_name", detail: "must be a string of at most 200 characters, or null" }],
    ]);
    expect(documentValidator(spec)(spec.components.schemas.ContactInput, { first_name: `${"\u{1F600}".repeat(100)}a` })).toEqual([]);
    const filter = await h.json("GET", `/public/v1/contacts?full_name=${encodeURIComponent(`${"\u{1F600}".repeat(100)}a`)}`);
    expect([filter.status, filter.body.errors]).toEqual([422, [{ parameter: "full_name", detail: `must be 1 to 200 characters (${LENGTH_COUNTING})` }]]);
  });
});

/** limitedStrings lists every string schema with a maxLength in `schema` (not through $ref), with where it is and its description. */
function limitedStrings(schema: any, where: string): [string, string | undefined][] {
  if (!schema || typeof schema !== "object") return [];
  const own: [string, string | undefined][] = typeof schema.maxLength === "number" && [schema.type].flat().includes("string") ? [[where, schema.description]] : [];
  const subs = Object.entries(schema).flatMap(([keyword, value]) => {
    if (keyword === "properties" || keyword === "patternProperties") return Object.entries(value as object).flatMap(([name, sub]) => limitedStrings(sub, `${where}/${keyword}/${name}`));
    if (Array.isArray(value) && ["anyOf", "oneOf", "allOf", "prefixItems"].includes(keyword)) return value.flatMap((sub, i) => limitedStrings(sub, `${where}/${keyword}/${i}`));
    if (["items", "additionalProperties", "not", "contains", "propertyNames"].includes(keyword)) return limitedStrings(value, `${where}/${keyword}`);
    return [];
  });
  return [...own, ...subs];
}
