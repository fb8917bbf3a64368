import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { dereference } from "../support/openapi.ts";

let server: RunningServer;
let dataDir: string;
let spec: any;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "crm-docs-"));
  server = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error" }, createLogger("error"));
  spec = await (await fetch(`${server.url}/docs/json`)).json();
});

afterAll(async () => {
  await server.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** references returns every src and href value of an HTML page. */
function references(html: string): string[] {
  return [...html.matchAll(/\b(?:src|href)\s*=\s*["']([^"']*)["']/gi)].map((m) => m[1]!);
}

const CONTENT_TYPES: Record<string, RegExp> = {
  ".js": /^(text|application)\/javascript(;\s*charset=utf-8)?$/i,
  ".css": /^text\/css(;\s*charset=utf-8)?$/i,
};

function expectedContentType(url: URL): RegExp {
  const ext = Object.keys(CONTENT_TYPES).find((e) => url.pathname.endsWith(e));
  if (!ext) throw new Error(`no expected content type for ${url.pathname}`);
  return CONTENT_TYPES[ext]!;
}

const CONSTRAINTS = new Set(["pattern", "minLength", "maxLength", "format", "enum", "const", "minimum", "maximum"]);

interface Operation {
  path: string;
  method: string;
  op: any;
}

function publicOperations(): Operation[] {
  return Object.entries(spec.paths as Record<string, any>)
    .filter(([path]) => path.startsWith("/public/v1/") || path === "/public/v1")
    .flatMap(([path, item]) => Object.entries(item as Record<string, any>).map(([method, op]) => ({ path, method, op })));
}

/** typeOf is the type a schema states, directly or as the one type of all its anyOf branches (an open enumeration: known values, then any string). */
function typeOf(schema: any): unknown {
  const branches: any[] = schema?.anyOf ?? [];
  return schema?.type ?? (branches.length > 0 && branches.every((branch) => branch.type === branches[0].type) ? branches[0].type : undefined);
}

/** problemDefects lists what is wrong with a documented problem response (nothing when it is right). */
function problemDefects(where: string, documented: any): string[] {
  if (!documented) return [`${where}: not documented`];
  const response = dereference(spec, documented);
  const types = Object.keys(response.content ?? {});
  if (types.join() !== "application/problem+json") return [`${where}: media type ${types.join() || "none"}, expected application/problem+json`];
  const schema = dereference(spec, response.content["application/problem+json"].schema);
  const defects: string[] = [];
  if (schema.type !== "object") defects.push(`${where}: schema is not an object`);
  for (const [member, type] of [["type", "string"], ["title", "string"], ["status", "integer"], ["detail", "string"]]) {
    if (!schema.required?.includes(member)) defects.push(`${where}: ${member} is not required`);
    if (typeOf(schema.properties?.[member!]) !== type) defects.push(`${where}: ${member} is not a ${type}`);
  }
  return defects;
}

/** operationDefects lists what an operation under /public/v1 fails to document. */
function operationDefects({ path, method, op }: Operation): string[] {
  const where = `${method.toUpperCase()} ${path}`;
  const defects: string[] = [];
  if (JSON.stringify(op.security) !== JSON.stringify([{ bearerAuth: [] }])) defects.push(`${where}: security is not [{ bearerAuth: [] }]`);
  if (typeof op.summary !== "string") defects.push(`${where}: no summary`);

  const statuses = Object.keys(op.responses ?? {});
  const success = statuses.filter((s) => /^2\d\d$/.test(s));
  if (success.length === 0) defects.push(`${where}: no 2xx response`);
  for (const status of success) {
    const content = op.responses[status].content;
    if (status === "204") {
      if (content !== undefined) defects.push(`${where} 204: documents a body`);
    } else if (Object.keys(content ?? {}).join() !== "application/json" || dereference(spec, content["application/json"].schema)?.type !== "object") {
      defects.push(`${where} ${status}: no application/json object schema`);
    }
  }

  for (const param of (path.match(/\{([^}]+)\}/g) ?? []).map((p) => p.slice(1, -1))) {
    if (!op.parameters?.some((p: any) => p.in === "path" && p.name === param && p.required)) defects.push(`${where}: path parameter ${param} not documented`);
  }
  if (op.requestBody && (Object.keys(op.requestBody.content ?? {}).join() !== "application/json" || dereference(spec, op.requestBody.content["application/json"].schema)?.type !== "object")) {
    defects.push(`${where}: request body is not an application/json object schema`);
  }

  defects.push(...problemDefects(`${where} 401`, op.responses?.["401"]), ...problemDefects(`${where} 403`, op.responses?.["403"]));
  // Anything validated can answer 422: a body, query or header parameters, constrained path parameters.
  const validated = op.requestBody !== undefined || (op.parameters ?? []).some((p: any) => p.in !== "path" || Object.keys(p.schema).some((k) => CONSTRAINTS.has(k)));
  if (validated && !op.responses?.["422"]) defects.push(`${where} 422: not documented, but the operation validates input`);
  for (const status of statuses.filter((s) => Number(s) >= 400 && s !== "401" && s !== "403")) defects.push(...problemDefects(`${where} ${status}`, op.responses[status]));
  return defects;
}

describe("docs page works offline", () => {
  test("GET /docs is an HTML page whose every asset is served by this server with its content type", async () => {
    const res = await fetch(`${server.url}/docs`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const html = await res.text();
    const refs = references(html);
    expect(refs.length).toBe(3); // stylesheet, Swagger UI bundle, start-up script
    const origin = new URL(server.url).origin;
    for (const ref of refs) {
      const url = new URL(ref, `${server.url}/docs`);
      expect(url.origin, `${ref} must not point to another host`).toBe(origin);
      const asset = await fetch(url);
      expect(asset.status, ref).toBe(200);
      expect(asset.headers.get("content-type") ?? "", ref).toMatch(expectedContentType(url));
      expect(asset.headers.get("cache-control"), ref).toBe("public, max-age=31536000, immutable");
      const text = await asset.text();
      expect(text.length, ref).toBeGreaterThan(0);
    }
  });

  test("the assets are the packaged Swagger UI files, and they load nothing from other hosts", async () => {
    const html = await (await fetch(`${server.url}/docs`)).text();
    const [css, bundle, init] = references(html).map((ref) => new URL(ref, server.url));
    expect(css!.pathname).toBe("/docs/assets/swagger-ui.css");
    expect(bundle!.pathname).toBe("/docs/assets/swagger-ui-bundle.js");
    expect(init!.pathname).toBe("/docs/assets/init.js");

    const cssText = await (await fetch(css!)).text();
    expect(cssText).toBe(await Bun.file(require.resolve("swagger-ui-dist/swagger-ui.css")).text());
    expect(cssText).not.toMatch(/@import|url\(\s*["']?(https?:)?\/\//i);
    const bundleBytes = await (await fetch(bundle!)).arrayBuffer();
    expect(bundleBytes.byteLength).toBe(Bun.file(require.resolve("swagger-ui-dist/swagger-ui-bundle.js")).size);

    const initText = await (await fetch(init!)).text();
    expect(initText).toContain('url: "/docs/json"');
    expect(initText).toContain("validatorUrl: null"); // the default badge would call validator.swagger.io
    expect(initText).not.toMatch(/https?:\/\//);
  });

  test("/docs/json answers the OpenAPI document as JSON", async () => {
    const res = await fetch(`${server.url}/docs/json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toStartWith("application/json");
    expect((await res.json()).openapi).toBe(spec.openapi);
  });
});

describe("docs errors", () => {
  test("an unknown asset is a 404 problem", async () => {
    const res = await fetch(`${server.url}/docs/assets/swagger-ui.js`);
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(await res.json()).toEqual({ type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: "No route matches GET /docs/assets/swagger-ui.js." });
  });
});

describe("docs security", () => {
  test("the page's Content-Security-Policy allows only this server and forbids framing", async () => {
    const res = await fetch(`${server.url}/docs`);
    const csp = res.headers.get("content-security-policy") ?? "";
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toMatch(/https?:|unsafe-eval/);
  });

  test("Try it out is off: /public/v1 refuses browser calls, so the page must not offer them", async () => {
    const init = await (await fetch(`${server.url}/docs/assets/init.js`)).text();
    expect(init).toContain("supportedSubmitMethods: []");
  });
});

describe("OpenAPI document", () => {
  test("is OpenAPI 3.1 with the bearerAuth scheme", () => {
    expect(spec.openapi).toMatch(/^3\.1\.\d+$/);
    expect(spec.info.title).toBe("CRM contacts and webhooks API");
    expect(spec.components.securitySchemes.bearerAuth).toEqual({ type: "http", scheme: "bearer", description: expect.any(String) });
  });

  test("documents the contacts, accounts and users routes", () => {
    const ops = publicOperations().map(({ method, path }) => `${method.toUpperCase()} ${path}`);
    expect(ops).toEqual(
      expect.arrayContaining([
        "POST /public/v1/contacts",
        "GET /public/v1/contacts",
        "GET /public/v1/contacts/{id}",
        "PATCH /public/v1/contacts/{id}",
        "DELETE /public/v1/contacts/{id}",
        "POST /public/v1/accounts",
        "GET /public/v1/accounts",
        "GET /public/v1/accounts/{id}",
        "GET /public/v1/users",
        "POST /public/v1/users",
        "GET /public/v1/users/{id}",
        "PATCH /public/v1/users/{id}",
        "PATCH /public/v1/accounts/{id}",
        "DELETE /public/v1/accounts/{id}",
        "GET /public/v1/accounts/deleted",
        "GET /public/v1/contacts/deleted",
        "POST /public/v1/contacts/{id}/accounts",
        "DELETE /public/v1/contacts/{id}/accounts/{accountId}",
        "POST /public/v1/contacts/{id}/tags",
        "DELETE /public/v1/contacts/{id}/tags/{tag}",
      ]),
    );
    expect(spec.paths["/docs"]).toBeUndefined();
    expect(spec.paths["/docs/json"]).toBeUndefined();
  });

  test("every /public/v1 operation needs bearerAuth and documents its success, problem responses and inputs", () => {
    const ops = publicOperations();
    expect(ops.length).toBeGreaterThanOrEqual(9);
    expect(ops.flatMap(operationDefects)).toEqual([]);
  });

  test("the walker finds defects: an undocumented 422, a problem as application/json, a missing security requirement", () => {
    const problem = spec.paths["/public/v1/contacts"].get.responses["401"];
    const op = { summary: "x", parameters: [{ in: "query", name: "q", schema: { type: "string" } }], responses: { 200: spec.paths["/public/v1/contacts"].get.responses["200"], 401: problem, 403: { content: { "application/json": problem.content["application/problem+json"] } } } };
    expect(operationDefects({ path: "/public/v1/x", method: "get", op })).toEqual([
      "GET /public/v1/x: security is not [{ bearerAuth: [] }]",
      "GET /public/v1/x 403: media type application/json, expected application/problem+json",
      "GET /public/v1/x 422: not documented, but the operation validates input",
    ]);
  });

  test("every /public/v1 operation documents the limits guard's 414, 429 (with Retry-After and RateLimit headers), 431 and 503 as problems", () => {
    const missing: string[] = [];
    for (const { path, method, op } of publicOperations()) {
      for (const status of ["414", "429", "431", "503"]) {
        const response = dereference(spec, op.responses[status]);
        if (!response?.content?.["application/problem+json"]?.schema) missing.push(`${method.toUpperCase()} ${path} ${status}`);
      }
      if (Object.keys(dereference(spec, op.responses["429"])?.headers ?? {}).sort().join() !== "RateLimit,RateLimit-Policy,Retry-After,X-Request-Id") missing.push(`${method.toUpperCase()} ${path} 429 headers`);
    }
    expect(missing).toEqual([]);
  });

  test("list operations document their query parameters", () => {
    const names = spec.paths["/public/v1/contacts"].get.parameters.filter((p: any) => p.in === "query").map((p: any) => p.name);
    expect(names.sort()).toEqual(["account_id", "assigned_user_id", "created_after", "cursor", "email", "full_name", "include", "page", "per_page", "sort_by", "sort_direction", "tag", "updated_after"]);
    const accounts = spec.paths["/public/v1/accounts"].get.parameters.filter((p: any) => p.in === "query").map((p: any) => p.name);
    expect(accounts.sort()).toEqual(["created_after", "cursor", "domain", "name", "page", "per_page", "sort_by", "sort_direction", "updated_after"]);
    for (const path of ["/public/v1/contacts/deleted", "/public/v1/accounts/deleted"]) {
      expect(spec.paths[path].get.parameters.filter((p: any) => p.in === "query").map((p: any) => p.name).sort()).toEqual(["cursor", "page", "per_page", "since"]);
    }
  });

  test("every 201 documents its Location header", () => {
    const created = publicOperations().filter(({ op }) => op.responses["201"]);
    expect(created.map(({ method, path }) => `${method.toUpperCase()} ${path}`).sort()).toEqual(["POST /public/v1/accounts", "POST /public/v1/contacts", "POST /public/v1/users", "POST /public/v1/webhook-subscriptions"]);
    for (const { op } of created) expect(op.responses["201"].headers.Location).toEqual({ description: expect.any(String), schema: { type: "string" } });
  });

  test("the sync routes have readable operationIds", () => {
    const ids = Object.fromEntries(publicOperations().map(({ path, method, op }) => [`${method.toUpperCase()} ${path}`, op.operationId]));
    expect({
      updateAccount: ids["PATCH /public/v1/accounts/{id}"],
      deleteAccount: ids["DELETE /public/v1/accounts/{id}"],
      listAccounts: ids["GET /public/v1/accounts"],
      addContactAccount: ids["POST /public/v1/contacts/{id}/accounts"],
      removeContactAccount: ids["DELETE /public/v1/contacts/{id}/accounts/{accountId}"],
      addContactTag: ids["POST /public/v1/contacts/{id}/tags"],
      removeContactTag: ids["DELETE /public/v1/contacts/{id}/tags/{tag}"],
      listDeletedContacts: ids["GET /public/v1/contacts/deleted"],
      listDeletedAccounts: ids["GET /public/v1/accounts/deleted"],
      createUser: ids["POST /public/v1/users"],
      updateUser: ids["PATCH /public/v1/users/{id}"],
      getUser: ids["GET /public/v1/users/{id}"],
    }).toEqual({
      updateAccount: "updateAccount",
      deleteAccount: "deleteAccount",
      listAccounts: "listAccounts",
      addContactAccount: "addContactAccount",
      removeContactAccount: "removeContactAccount",
      addContactTag: "addContactTag",
      removeContactTag: "removeContactTag",
      listDeletedContacts: "listDeletedContacts",
      listDeletedAccounts: "listDeletedAccounts",
      createUser: "createUser",
      updateUser: "updateUser",
      getUser: "getUser",
    });
  });
});
