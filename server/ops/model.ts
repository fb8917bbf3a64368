import { t } from "elysia";

/** Health is the body of GET /healthz. */
export const Health = t.Object({
  status: t.Literal("ok"),
  version: t.String(),
  uptime_seconds: t.Integer(),
});
export type Health = typeof Health.static;

/** ReadinessChecks holds each readiness check's verdict: "ok" or a short code of what is wrong. */
export const ReadinessChecks = t.Object({
  database: t.String({ description: "ok when the database takes a write (rolled back on PostgreSQL; on SQLite a row changed and put back, committed, so that the storage is written)" }),
  migrations: t.String({ description: "ok when every migration embedded in this version is applied" }),
  delivery_loop: t.String({ description: "ok while the webhook delivery loop runs" }),
});
export type ReadinessChecks = typeof ReadinessChecks.static;

/** Readiness is the body of GET /readyz when the service can take traffic. */
export const Readiness = t.Object({
  status: t.Literal("ready"),
  checks: ReadinessChecks,
});
export type Readiness = typeof Readiness.static;
