import { Elysia, t } from "elysia";
import { publicOperation } from "../http/openapi-docs.ts";
import { problemResponses } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import { Health, Readiness } from "./model.ts";
import { clientHints } from "../http/client-address.ts";
import { CONSOLE_PREFIX, isConsolePath, PUBLIC_PREFIX } from "../http/conventions.ts";
import { pathOf } from "../http/request-log.ts";
import { authorizeMetrics, health, mayReadMetrics, metricsText, NotReadyLog, readiness, refuseOnNewerDatabase, WriteProbe } from "./service.ts";

const tags = ["Operations"];

/** CONSOLE_ASSETS is where the console's stylesheet and scripts are served from: they read nothing of the database. */
const CONSOLE_ASSETS = `${CONSOLE_PREFIX}/assets/`;

/**
 * newerDatabaseGuard refuses every API and console request, before authentication reads or writes
 * anything, once a newer crm has migrated the database under this instance (503 database-newer);
 * the probes, /metrics, /docs and the console's assets (the refusal page's stylesheet) still answer.
 */
export function newerDatabaseGuard(rt: Runtime) {
  return new Elysia({ name: "newer-database" }).onRequest(({ request }) => {
    if (rt.migrations.newer.length === 0) return;
    const path = pathOf(request);
    if (path.startsWith(PUBLIC_PREFIX) || (isConsolePath(path) && !path.startsWith(CONSOLE_ASSETS))) refuseOnNewerDatabase(rt);
  });
}

/** opsRoutes serves /healthz, /readyz and /metrics for load balancers, systemd checks and Prometheus. */
export function opsRoutes(rt: Runtime) {
  const notReadyLog = new NotReadyLog(rt.log);
  const probe = new WriteProbe(rt.db);
  const hints = (request: Request) => clientHints(request, rt.listening()?.requestIP(request)?.address ?? null);
  return new Elysia({ name: "ops" })
    .get("/healthz", () => health(), {
      response: { 200: Health },
      detail: { operationId: "getHealth", summary: "Liveness", description: "200 while the process answers. No authentication.", tags, ...publicOperation },
    })
    .get("/readyz", ({ request }) => readiness(rt, notReadyLog, probe, mayReadMetrics(rt.config, request, hints(request))), {
      response: { 200: Readiness, ...problemResponses(503) },
      detail: {
        operationId: "getReadiness",
        summary: "Readiness",
        description:
          "200 when the database takes writes, migrations are current and the delivery loop runs; 503 problem+json naming each failing check by a short code otherwise (the reasons, which may name files, database roles and driver errors, are logged, and given in `reasons` only to a request GET /metrics would answer: the metrics token, or loopback), or shutting-down once a stop has begun (SIGTERM, SIGINT). No authentication.",
        tags,
        ...publicOperation,
      },
    })
    .get(
      "/metrics",
      ({ request, set }) => {
        authorizeMetrics(rt.config, request, hints(request));
        set.headers["content-type"] = "text/plain; version=0.0.4; charset=utf-8";
        return metricsText(rt);
      },
      {
        response: { 200: t.String({ description: "Prometheus text format 0.0.4" }), ...problemResponses(401, 403) },
        detail: {
          operationId: "getMetrics",
          summary: "Prometheus metrics",
          description: "Requests by route and status with latency histograms, webhook deliveries and attempts, queue depth, oldest pending delivery age. Needs the metrics token (Authorization: Bearer) when one is configured; otherwise answers loopback clients only, addressed as localhost or a loopback address (Host). Refuses browsers (Origin or Sec-Fetch-Site): 403 browser-request.",
          tags,
          // Either the metrics token, or none from a loopback address.
          security: [{ metricsToken: [] }, {}],
        },
      },
    );
}
