import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";

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

function expectProblemResponse(where: string, response: any): void {
  expect(response, `${where} is documented`).toBeDefined();
  expect(Object.keys(response.content ?? {}), `${where} media type`).toEqual(["application/problem+json"]);
  const schema = response.content["application/problem+json"].schema;
  expect(schema.type, `${where} schema type`).toBe("object");
  expect(schema.required, `${where} required members`).toEqual(expect.arrayContaining(["type", "title", "status", "detail"]));
  expect(schema.properties.type.type).toBe("string");
  expect(schema.properties.title.type).toBe("string");
  expect(schema.properties.status.type, `${where} status is an integer`).toBe("integer");
  expect(schema.properties.detail.type).toBe("string");
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
      ]),
    );
    expect(spec.paths["/docs"]).toBeUndefined();
    expect(spec.paths["/docs/json"]).toBeUndefined();
  });

  test("every /public/v1 operation needs bearerAuth and documents its success, problem responses and inputs", () => {
    const ops = publicOperations();
    expect(ops.length).toBeGreaterThanOrEqual(9);
    for (const { path, method, op } of ops) {
      const where = `${method.toUpperCase()} ${path}`;
      expect(op.security, `${where} security`).toEqual([{ bearerAuth: [] }]);
      expect(typeof op.summary, `${where} summary`).toBe("string");

      const statuses = Object.keys(op.responses ?? {});
      const success = statuses.filter((s) => /^2\d\d$/.test(s));
      expect(success.length, `${where} has a 2xx response`).toBeGreaterThan(0);
      for (const status of success) {
        const response = op.responses[status];
        if (status === "204") {
          expect(response.content, `${where} 204 has no body`).toBeUndefined();
          continue;
        }
        expect(Object.keys(response.content ?? {}), `${where} ${status} media type`).toEqual(["application/json"]);
        expect(response.content["application/json"].schema.type, `${where} ${status} schema`).toBe("object");
      }

      for (const param of (path.match(/\{([^}]+)\}/g) ?? []).map((p) => p.slice(1, -1))) {
        expect(op.parameters?.some((p: any) => p.in === "path" && p.name === param && p.required), `${where} documents path parameter ${param}`).toBe(true);
      }
      if (["post", "put", "patch"].includes(method)) {
        expect(Object.keys(op.requestBody?.content ?? {}), `${where} request body media type`).toEqual(["application/json"]);
        expect(op.requestBody.content["application/json"].schema.type, `${where} request body schema`).toBe("object");
      }

      expectProblemResponse(`${where} 401`, op.responses["401"]);
      expectProblemResponse(`${where} 403`, op.responses["403"]);
      const takesInput = (op.parameters?.length ?? 0) > 0 || op.requestBody !== undefined;
      if (takesInput) expectProblemResponse(`${where} 422`, op.responses["422"]);
      for (const status of statuses.filter((s) => Number(s) >= 400)) expectProblemResponse(`${where} ${status}`, op.responses[status]);
    }
  });

  test("list operations document their query parameters", () => {
    const names = spec.paths["/public/v1/contacts"].get.parameters.filter((p: any) => p.in === "query").map((p: any) => p.name);
    expect(names.sort()).toEqual(["created_after", "cursor", "email", "full_name", "include", "page", "per_page", "sort_by", "sort_direction", "updated_after"]);
  });
});
