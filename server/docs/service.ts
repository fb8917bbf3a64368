// The package's main entry also replaces TypeBox's "email", "url", "uuid"... format checks, app-wide,
// with ones that build a Zod schema per call (~20 us per checked email); the generator alone does not.
import { toOpenAPISchema } from "@elysiajs/openapi/openapi";
import type { AnyElysia, TSchema } from "elysia";
import { Kind, OptionalKind } from "@sinclair/typebox";
import { ENTITY_TAGS_PATTERN, UNVERSIONED_RESOURCES } from "../http/preconditions.ts";
import { SAFE_REQUEST_ID } from "../http/request-log.ts";
import { canonicalJson } from "../idempotency/service.ts";
import { textResponse } from "../limits/answer-budget.ts";
import { tidyDocument, withFieldDescriptions, withLengthCounting } from "./document.ts";
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

/** Documentation is what the OpenAPI document states beyond the routes: its title, security schemes, named schemas and the webhooks the service sends. */
export interface Documentation {
  info: DocsInfo;
  securitySchemes: Record<string, unknown>;
  /** schemas named in components.schemas and referenced where routes use them (dependencies first) */
  schemas: Record<string, TSchema>;
  /** the OpenAPI 3.1 top-level `webhooks`: requests the service makes to receivers */
  webhooks?: Record<string, unknown>;
  /** the tags operations and webhooks are grouped by, each with what its group is about */
  tags: { name: string; description: string }[];
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
  return textResponse(html, {
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

/** describedSchemas are a route's body, parameter, header and response schemas as withFieldDescriptions rebuilds them; its responses are one schema or schemas by status. */
function describedSchemas(hooks: Json): Json {
  const { body, query, params, headers, response } = hooks;
  const responses = response && typeof response === "object" && !(Kind in response) ? Object.fromEntries(Object.entries(response as Json).map(([status, schema]) => [status, withFieldDescriptions(schema)])) : withFieldDescriptions(response);
  return { body: withFieldDescriptions(body), query: withFieldDescriptions(query), params: withFieldDescriptions(params), headers: withFieldDescriptions(headers), response: responses };
}

/**
 * routeTable is the app's route table as the OpenAPI generator should see it: every body is
 * parsed by the JSON-only parse hook of http/conventions.ts, which the generator cannot read
 * (it is a function), so the routes declare it by name and bodies are documented as JSON.
 */
function routeTable(app: AnyElysia): AnyElysia {
  const internal = app as unknown as { getGlobalRoutes(): { method: string; hooks?: Json }[]; getGlobalDefinitions?(): unknown };
  const declared = (route: { method: string; hooks?: Json }) => {
    if (!route.hooks) return route;
    const marked = (route.hooks.beforeHandle as { fn?: { [UNVERSIONED_RESOURCES]?: string } }[] | undefined)?.find((hook) => hook.fn?.[UNVERSIONED_RESOURCES]);
    // Reads ignore If-Match (unversionedWrites): only a write documents it and its 412.
    const unversioned = route.method === "GET" || route.method === "HEAD" ? undefined : marked?.fn?.[UNVERSIONED_RESOURCES];
    // The generator marks every body required; one declared t.Optional may be left out.
    const optionalBody = route.hooks.body?.[OptionalKind] === "Optional";
    const marks = { ...(unversioned ? { [UNVERSIONED_MARK]: unversioned } : {}), ...(optionalBody ? { [OPTIONAL_BODY_MARK]: true } : {}) };
    const hooks = {
      ...route.hooks,
      ...describedSchemas(route.hooks),
      ...(route.hooks.parse ? { parse: [{ fn: "application/json" }] } : {}),
      ...(Object.keys(marks).length > 0 ? { detail: { ...route.hooks.detail, ...marks } } : {}),
    };
    return { ...route, hooks };
  };
  return {
    getGlobalRoutes: () => internal.getGlobalRoutes().map(declared),
    getGlobalDefinitions: () => internal.getGlobalDefinitions?.(),
  } as unknown as AnyElysia;
}

/** UNVERSIONED_MARK carries, from routeTable to documentProtocolHeaders, what a route whose writes refuse entity tags (refuseEntityTags, unversionedWrites) has no version of. */
const UNVERSIONED_MARK = "x-crm-unversioned";
/** OPTIONAL_BODY_MARK carries, from routeTable to documentProtocolHeaders, that a route's body may be left out. */
const OPTIONAL_BODY_MARK = "x-crm-optional-body";

/**
 * compileRoutes compiles every route's handler, as its first request would. Compiling sets
 * additionalProperties: false on the route's top-level body and response schemas that say
 * nothing (Elysia strips unknown properties there), on the shared schema objects; without this,
 * the document would change with which routes had been called before it was built.
 */
function compileRoutes(app: AnyElysia): void {
  for (const route of (app as unknown as { getGlobalRoutes(): { compile?(): unknown }[] }).getGlobalRoutes()) route.compile?.();
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
 * GUARD_RESPONSES are answered to /public/v1 operations (some to any path) by the limits guard before routing
 * (server/limits/routes.ts) or by the body parser every route passes (http/conventions.ts, a body
 * sent where none is read included), so no route declares them; the document names them once in
 * components.responses and refers to them from each operation that does not state its own.
 */
const GUARD_RESPONSES: Record<string, { name: string; description: string; headers?: Json }> = {
  "400": { name: "BadRequest", description: "The request target is not valid percent-encoded UTF-8, or a body was sent that is not JSON." },
  "408": { name: "BodyTimeout", description: "A body was sent that did not arrive in time (--body-timeout-ms); the connection is closed." },
  "413": { name: "BodyTooLarge", description: "A body was sent that is larger than 1 MiB." },
  "414": { name: "QueryTooLong", description: "The query string is longer than 4 KiB." },
  "415": { name: "UnsupportedMediaType", description: "A body was sent with a Content-Type other than application/json." },
  "429": {
    name: "TooManyRequests",
    description: "Over this token's rate limit, or too many requests without a valid token from this address.",
    headers: {
      "Retry-After": header("Seconds to wait before the next request gets through."),
      RateLimit: header('Remaining quota, e.g. "write";r=0;t=1 (draft-ietf-httpapi-ratelimit-headers).'),
      "RateLimit-Policy": header('The quota, e.g. "write";q=100;w=2.'),
    },
  },
  "431": { name: "HeadersTooLarge", description: "The request headers are larger than 8 KiB or more than 100 fields." },
  "503": {
    name: "ServerBusy",
    description: "The server is serving its connection limit, or its database cannot be used just now; retry after Retry-After.",
    headers: { "Retry-After": header("Seconds to wait before retrying.") },
  },
};

/** SHARED_HEADERS are the response headers named once in components.headers: X-Request-Id, on every answer, and the RateLimit pair, on every /public/v1 answer to a counted request. */
const SHARED_HEADERS = {
  RateLimit: header(
    'Remaining quota of the bucket this request was counted in, e.g. "read";r=99;t=1: "read" or "write" for a token, "failed-auth" for a request without a valid token (draft-ietf-httpapi-ratelimit-headers). Sent on every /public/v1 answer, errors included, but those given before the request is counted: a malformed or oversized request, a full server, a browser call.',
  ),
  "RateLimit-Policy": header('That bucket\'s quota and window, e.g. "read";q=100;w=1; sent with RateLimit.'),
  "X-Request-Id": header("This request's id: the one sent in X-Request-Id when it is safe, else a new req_...; the log line of the request carries it. Quote it when reporting a failure."),
};

/** headerRefs refers to SHARED_HEADERS by name, as a response's headers. */
const headerRefs = (...names: (keyof typeof SHARED_HEADERS)[]) => Object.fromEntries(names.map((name) => [name, { $ref: `#/components/headers/${name}` }]));

/** RATE_LIMIT_HEADERS are what every /public/v1 response declares of the rate limits. */
const RATE_LIMIT_HEADERS = headerRefs("RateLimit", "RateLimit-Policy");

/** addRateLimitHeaders declares the RateLimit headers the authentication puts on every /public/v1 answer to a request it counted, a read's 304 (Not Modified) and the errors included. */
function addRateLimitHeaders(document: Json): void {
  for (const [path, pathItem] of Object.entries(document.paths as Json)) {
    if (!path.startsWith("/public/v1")) continue;
    for (const operation of Object.values(pathItem as Json)) {
      for (const response of Object.values(operation.responses as Json)) {
        if (!response.$ref) response.headers = { ...RATE_LIMIT_HEADERS, ...response.headers };
      }
    }
  }
}

/** EVERY_PATH_GUARD_STATUSES are the guard's answers on any path (a malformed or oversized request, a full server); the others come with /public/v1's bodies, tokens and rate limits. */
const EVERY_PATH_GUARD_STATUSES = new Set(["400", "414", "431", "503"]);

/**
 * UNEXPECTED is every operation's `default` response: what no status of the operation names. A
 * generated client then has the Problem of a 500 (and of a 503 an operation does not list) typed,
 * with the request id its detail asks to quote.
 */
const UNEXPECTED = {
  name: "UnexpectedError",
  description:
    "Any other answer: 500 urn:crm:problem:internal, a failure of the service (report it, quoting the request id of its detail and X-Request-Id), or a 503 this operation does not list (the database unavailable or busy, storage full, shutting down), with Retry-After. Its type may be one this document does not list yet.",
  headers: { "Retry-After": header("Seconds to wait before retrying, on a 503.") },
};

/** OPS_PREFIX names the variants of the guard's responses (and of `default`) that the probes and /metrics answer: without the RateLimit headers, which only /public/v1 counts. */
const OPS_PREFIX = "Ops";

/**
 * addGuardResponses documents the limits guard's problem answers: all of them on every /public/v1
 * operation, those of any path on the others (the probes, /metrics); and every operation's
 * `default` response. The /public/v1 ones declare the RateLimit headers of a counted request.
 */
function addGuardResponses(document: Json): void {
  const problem = { "application/problem+json": { schema: { $ref: "#/components/schemas/Problem" } } };
  const responses: Json = (document.components.responses ??= {});
  for (const [status, { name, headers, ...response }] of [...Object.entries(GUARD_RESPONSES), ["default", UNEXPECTED] as const]) {
    responses[name] = { ...response, headers: { ...RATE_LIMIT_HEADERS, ...headers }, content: problem };
    if (status === "default" || EVERY_PATH_GUARD_STATUSES.has(status)) responses[`${OPS_PREFIX}${name}`] = { ...response, ...(headers ? { headers } : {}), content: problem };
  }
  for (const [path, pathItem] of Object.entries(document.paths as Json)) {
    const metered = path.startsWith("/public/v1");
    const guarded = Object.entries(GUARD_RESPONSES).filter(([status]) => metered || EVERY_PATH_GUARD_STATUSES.has(status));
    const prefix = metered ? "" : OPS_PREFIX;
    for (const operation of Object.values(pathItem as Json)) {
      for (const [status, { name }] of guarded) operation.responses[status] ??= { $ref: `#/components/responses/${prefix}${name}` };
      operation.responses.default = { $ref: `#/components/responses/${prefix}${UNEXPECTED.name}` };
    }
  }
}

/**
 * addRequestIds declares X-Request-Id, which http/conventions.ts puts on every answer: as a header
 * of every response, and as the optional request header whose value (a safe one) the answer and
 * the log line then carry instead of a new req_... id.
 */
function addRequestIds(document: Json): void {
  const components = document.components;
  components.parameters = {
    ...components.parameters,
    RequestId: {
      in: "header",
      name: "x-request-id",
      required: false,
      schema: { type: "string", pattern: SAFE_REQUEST_ID.source },
      description:
        "Your id for this request, answered in X-Request-Id and logged with it: 1 to 100 of A-Z a-z 0-9 . _ : -. One shaped like a secret (crm_..., whsec_..., 43 base64url characters) or equal to the metrics token is replaced by a new req_... id.",
    },
  };
  const requestId = headerRefs("X-Request-Id");
  for (const response of Object.values(components.responses as Json)) response.headers = { ...response.headers, ...requestId };
  for (const pathItem of Object.values(document.paths as Json)) {
    for (const operation of Object.values(pathItem as Json)) {
      operation.parameters = [...(operation.parameters ?? []), { $ref: "#/components/parameters/RequestId" }];
      for (const response of Object.values(operation.responses as Json)) if (!response.$ref) response.headers = { ...response.headers, ...requestId };
    }
  }
}

/**
 * contractVersion is the document's info.version: the package version with, as semver build
 * metadata, the first 12 hex digits of the SHA-256 of everything in the document but its info, in
 * canonical JSON. package.json's version is not bumped with every route change (it stayed 0.1.0
 * through 42 operations), so this changes whenever the contract does, by itself, where a counter
 * could be forgotten; it tells documents apart, not which is newer.
 */
function contractVersion(document: Json, packageVersion: string): string {
  const { info: _, ...contract } = document;
  // As served: JSON leaves out the members the document holds as undefined.
  const digest = new Bun.CryptoHasher("sha256").update(canonicalJson(JSON.parse(JSON.stringify(contract)))).digest("hex");
  return `${packageVersion}+${digest.slice(0, 12)}`;
}

const PROBLEM_CONTENT = { "application/problem+json": { schema: { $ref: "#/components/schemas/Problem" } } };

/** problemResponse is a problem+json response of the document, with headers if given. */
const problemResponse = (description: string, headers?: Json) => ({ description, ...(headers ? { headers } : {}), content: PROBLEM_CONTENT });

/** versionedData is the schema of the one versioned resource a response's envelope holds (its data has a version, which the ETag carries); undefined for any other response. */
function versionedData(document: Json, response: Json): Json | undefined {
  const deref = (schema: Json | undefined): Json | undefined =>
    typeof schema?.$ref === "string" ? document.components.schemas?.[schema.$ref.replace("#/components/schemas/", "")] : schema;
  const data = deref(deref(response?.content?.["application/json"]?.schema)?.properties?.data);
  return data?.properties?.version !== undefined ? data : undefined;
}

/**
 * documentProtocolHeaders states what the HTTP conventions add to /public/v1 answers, which no
 * route schema says: the ETag of a versioned resource (on its reads and writes, to send back in
 * If-Match, and in If-None-Match where its read answers 304; on a read's 304 and on a 412 as the
 * current version); for a POST taking an Idempotency-Key, Idempotent-Replayed on a replayed
 * answer and the 409 (with Retry-After) of a key in use; WWW-Authenticate on 401; and for writes
 * of resources without versions (unversionedWrites), the If-Match header (and on a member's, If-None-Match) and the 412 they bring;
 * and that a body declared optional is not required.
 */
function documentProtocolHeaders(document: Json): void {
  // The resources whose read answers 304 to If-None-Match: the ETag of any answer holding one is worth sending there too.
  const readIfChanged = new Set(Object.values(document.paths as Json).flatMap((item: Json) => (item.get?.responses?.["304"] ? [versionedData(document, item.get.responses["200"])] : [])));
  for (const [path, pathItem] of Object.entries(document.paths as Json)) {
    const metrics = path === "/metrics" ? (pathItem as Json).get.responses : undefined;
    // /metrics asks for its own token, in its own realm.
    if (metrics?.["401"]) metrics["401"] = { ...metrics["401"], headers: { "WWW-Authenticate": header('Bearer realm="metrics": the request needs the metrics token.') } };
    if (!path.startsWith("/public/v1")) continue;
    for (const operation of Object.values(pathItem as Json)) {
      const responses = operation.responses as Json;
      const headerParameter = (name: string) => (operation.parameters ?? []).some((p: Json) => p.in === "header" && p.name === name);
      const unversioned = operation[UNVERSIONED_MARK] as string | undefined;
      if (operation[OPTIONAL_BODY_MARK] && operation.requestBody) operation.requestBody.required = false;
      delete operation[UNVERSIONED_MARK];
      delete operation[OPTIONAL_BODY_MARK];
      if (unversioned && !headerParameter("if-match")) {
        // If-None-Match is read on a write to a member (a path with an id), not on a create.
        const member = path.includes("{");
        operation.parameters = [
          ...(operation.parameters ?? []),
          {
            in: "header",
            name: "if-match",
            required: false,
            schema: withLengthCounting({ type: "string", maxLength: 1000, pattern: ENTITY_TAGS_PATTERN }),
            description: `${unversioned}: any entity tag answers 412 and changes nothing; * lets the write through.`,
          },
          ...(member
            ? [{ in: "header", name: "if-none-match", required: false, schema: withLengthCounting({ type: "string", maxLength: 1000, pattern: ENTITY_TAGS_PATTERN }), description: "* answers 412 and changes nothing, as the resource exists; entity tags, which it cannot match, let the write through." }]
            : []),
        ];
        responses["412"] ??= problemResponse(`Precondition Failed: If-Match named an entity tag, which no unversioned resource can match${member ? ", or If-None-Match was *" : ""}.`);
      }
      const versionedResource = Object.entries(responses).flatMap(([status, response]) => (/^2\d\d$/.test(status) ? [versionedData(document, response as Json)] : [])).find(Boolean);
      const etag = versionedResource !== undefined;
      // A write to a versioned resource that answers no body (a DELETE) still gives the current version with its 412.
      const currentVersionOn412 = (etag || headerParameter("if-match")) && !unversioned;
      const idempotent = headerParameter("idempotency-key");
      if (idempotent) {
        responses["409"] ??= problemResponse("Conflict: a request with this Idempotency-Key is still running.");
        responses["409"].headers = { ...responses["409"].headers, "Retry-After": header("Seconds to wait before sending the request again, when its Idempotency-Key is still in use.") };
      }
      for (const [status, response] of Object.entries(responses) as [string, Json][]) {
        if (response.$ref) continue;
        const added: Json = {};
        if (/^2\d\d$/.test(status) && etag && status !== "204") {
          const reread = readIfChanged.has(versionedResource) ? ", or in If-None-Match to read it again only if it changed (304 Not Modified otherwise)" : "";
          // A contact read with include embeds relations whose changes its version does not follow: sent without an ETag.
          const embeds = (operation.parameters ?? []).some((p: Json) => p.in === "query" && p.name === "include");
          const absent = embeds ? " Not sent when include embeds relations." : "";
          added.ETag = header(`The resource's version as a strong entity tag ("3"): send it back in If-Match to write only that version${reread}.${absent}`);
        }
        if (status === "412" && currentVersionOn412) added.ETag = header("The version stored now, to read again and retry.");
        if (status === "304" && etag) {
          response.description = "Not Modified: If-None-Match named the stored version (or was *), so your copy is current; no body.";
          added.ETag = header("The version stored now, which If-None-Match named.");
        }
        if (/^2\d\d$/.test(status) && idempotent) added["Idempotent-Replayed"] = header('"true" on the first answer replayed for a repeated Idempotency-Key; absent otherwise.');
        if (status === "401") added["WWW-Authenticate"] = header('Bearer realm="crm": the request needs an API token.');
        if (Object.keys(added).length > 0) response.headers = { ...response.headers, ...added };
      }
    }
  }
}

/** signedWebhooksNeedNoCredentials states security: [] on the webhook requests the service sends: they carry no credentials, the receiver checks webhook-signature. */
function signedWebhooksNeedNoCredentials(document: Json): void {
  for (const pathItem of Object.values((document.webhooks ?? {}) as Json)) {
    for (const operation of Object.values(pathItem as Json)) operation.security ??= [];
  }
}

const cache = new WeakMap<AnyElysia, { routeCount: number; document: Json }>();

/** openApiDocument builds the OpenAPI 3.1 document of every route the app serves (cached until routes change). */
export function openApiDocument(app: AnyElysia, { info, securitySchemes, schemas, webhooks, tags }: Documentation): Json {
  const routeCount = (app as unknown as { getGlobalRoutes(): unknown[] }).getGlobalRoutes().length;
  const hit = cache.get(app);
  if (hit?.routeCount === routeCount) return hit.document;
  compileRoutes(app);
  const { paths, components } = toOpenAPISchema(routeTable(app));
  // Relative: the API is served by the server that serves this document, whatever its public address.
  const servers = [{ url: "/", description: "This server" }];
  const document: Json = { openapi: "3.1.2", info, servers, tags, paths, ...(webhooks ? { webhooks } : {}), components: { ...components, headers: SHARED_HEADERS, securitySchemes } };
  fixResponses(document);
  addGuardResponses(document);
  signedWebhooksNeedNoCredentials(document);
  tidyDocument(document, schemas);
  documentProtocolHeaders(document);
  addRateLimitHeaders(document);
  addRequestIds(document);
  document.info = { ...info, version: contractVersion(document, info.version) };
  cache.set(app, { routeCount, document });
  return document;
}
