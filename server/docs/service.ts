// The package's main entry also replaces TypeBox's "email", "url", "uuid"... format checks, app-wide,
// with ones that build a Zod schema per call (~20 us per checked email); the generator alone does not.
import { toOpenAPISchema } from "@elysiajs/openapi/openapi";
import type { AnyElysia } from "elysia";
import swaggerUi from "swagger-ui-dist/package.json" with { type: "json" };
// Imported as files so `bun build --compile` embeds them: /docs needs no CDN and no files beside the binary.
import swaggerBundlePath from "swagger-ui-dist/swagger-ui-bundle.js" with { type: "file" };
import swaggerCssPath from "swagger-ui-dist/swagger-ui.css" with { type: "file" };

/** DocsInfo is the title block of the OpenAPI document. */
export interface DocsInfo {
  title: string;
  version: string;
  description: string;
}

/** Documentation is what the OpenAPI document states beyond the routes: its title, security schemes and the webhooks the service sends. */
export interface Documentation {
  info: DocsInfo;
  securitySchemes: Record<string, unknown>;
  /** the OpenAPI 3.1 top-level `webhooks`: requests the service makes to receivers */
  webhooks?: Record<string, unknown>;
}

type Json = Record<string, any>;

/**
 * Swagger UI's start-up script. "Try it out" is off because /public/v1 refuses browser calls
 * (403) by design, and the online validator badge is off so the page contacts no other host.
 */
const INIT_SCRIPT = `window.ui = SwaggerUIBundle({
  url: "/docs/json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  supportedSubmitMethods: [],
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
`;

/** DOCS_ASSETS are the files the docs page loads, by name under /docs/assets/. */
const DOCS_ASSETS = {
  "swagger-ui-bundle.js": { path: swaggerBundlePath, version: swaggerUi.version },
  "swagger-ui.css": { path: swaggerCssPath, version: swaggerUi.version },
  "init.js": { path: null, version: Bun.hash(INIT_SCRIPT).toString(36) },
} as const;

export type DocsAssetName = keyof typeof DOCS_ASSETS;

const assetUrl = (name: DocsAssetName) => `/docs/assets/${name}?v=${DOCS_ASSETS[name].version}`;

// The page may load only what this server serves; Swagger UI sets inline styles and shows data: images.
const DOCS_CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** docsPageResponse renders the API reference page; every asset it loads is served from /docs/assets. */
export function docsPageResponse({ info }: Documentation): Response {
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(info.title)} ${escapeHtml(info.version)}</title>
<link rel="stylesheet" href="${assetUrl("swagger-ui.css")}">
</head>
<body>
<div id="swagger-ui"></div>
<script src="${assetUrl("swagger-ui-bundle.js")}"></script>
<script src="${assetUrl("init.js")}"></script>
</body>
</html>
`;
  return new Response(html, {
    headers: { "content-type": "text/html; charset=utf-8", "cache-control": "no-cache", "content-security-policy": DOCS_CSP },
  });
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** docsAssetResponse serves one embedded docs asset; its URL carries a version, so it is cached for a year. */
export function docsAssetResponse(name: DocsAssetName): Response {
  const asset = DOCS_ASSETS[name];
  const headers = { "cache-control": "public, max-age=31536000, immutable" };
  if (asset.path === null) return new Response(INIT_SCRIPT, { headers: { ...headers, "content-type": "text/javascript; charset=utf-8" } });
  return new Response(Bun.file(asset.path), { headers });
}

/**
 * routeTable is the app's route table as the OpenAPI generator should see it: every body is
 * parsed by the JSON-only parse hook of http/conventions.ts, which the generator cannot read
 * (it is a function), so the routes declare it by name and bodies are documented as JSON.
 */
function routeTable(app: AnyElysia): AnyElysia {
  const internal = app as unknown as { getGlobalRoutes(): { hooks?: Json }[]; getGlobalDefinitions?(): unknown };
  return {
    getGlobalRoutes: () => internal.getGlobalRoutes().map((route) => (route.hooks?.parse ? { ...route, hooks: { ...route.hooks, parse: [{ fn: "application/json" }] } } : route)),
    getGlobalDefinitions: () => internal.getGlobalDefinitions?.(),
  } as unknown as AnyElysia;
}

const header = (description: string) => ({ description, schema: { type: "string" } });

/**
 * fixResponses makes problem responses application/problem+json, gives bodiless responses no
 * content, and documents the Location of every 201 (set by idempotentPost).
 */
function fixResponses(document: Json): void {
  for (const pathItem of Object.values(document.paths as Json)) {
    for (const operation of Object.values(pathItem as Json)) {
      for (const [status, response] of Object.entries((operation.responses ?? {}) as Json)) {
        const content = response.content as Json | undefined;
        if (content && typeof content.type === "string") delete response.content; // t.Void(): no body
        else if (Number(status) >= 400 && content?.["application/json"]) response.content = { "application/problem+json": content["application/json"] };
        if (status === "201") response.headers = { ...response.headers, Location: header("Path of the created resource, e.g. /public/v1/contacts/con_...") };
      }
    }
  }
}

/**
 * GUARD_RESPONSES are answered to any /public/v1 operation by the limits guard before routing
 * (server/limits/routes.ts), so no route declares them; the document adds them to each.
 */
const GUARD_RESPONSES: Record<string, { description: string; headers?: Json }> = {
  "414": { description: "The query string is longer than 4 KiB." },
  "429": {
    description: "Over this token's rate limit, or too many requests without a valid token from this address.",
    headers: {
      "Retry-After": header("Seconds to wait before the next request gets through."),
      RateLimit: header('Remaining quota, e.g. "write";r=0;t=1 (draft-ietf-httpapi-ratelimit-headers).'),
      "RateLimit-Policy": header('The quota, e.g. "write";q=100;w=2.'),
    },
  },
  "431": { description: "The request headers are larger than 8 KiB or more than 100 fields." },
  "503": { description: "The server is serving its connection limit; retry shortly." },
};

/** addGuardResponses documents the limits guard's answers on every /public/v1 operation, with the problem body of its 401. */
function addGuardResponses(document: Json): void {
  for (const [path, pathItem] of Object.entries(document.paths as Json)) {
    if (!path.startsWith("/public/v1")) continue;
    for (const operation of Object.values(pathItem as Json)) {
      const content = operation.responses?.["401"]?.content;
      for (const [status, response] of Object.entries(GUARD_RESPONSES)) operation.responses[status] ??= { ...response, content };
    }
  }
}

const cache = new WeakMap<AnyElysia, { routeCount: number; document: Json }>();

/** openApiDocument builds the OpenAPI 3.1 document of every route the app serves (cached until routes change). */
export function openApiDocument(app: AnyElysia, { info, securitySchemes, webhooks }: Documentation): Json {
  const routeCount = (app as unknown as { getGlobalRoutes(): unknown[] }).getGlobalRoutes().length;
  const hit = cache.get(app);
  if (hit?.routeCount === routeCount) return hit.document;
  const { paths, components } = toOpenAPISchema(routeTable(app));
  const document: Json = { openapi: "3.1.2", info, paths, ...(webhooks ? { webhooks } : {}), components: { ...components, securitySchemes } };
  fixResponses(document);
  addGuardResponses(document);
  cache.set(app, { routeCount, document });
  return document;
}
