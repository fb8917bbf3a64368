import type { Database } from "bun:sqlite";
import { Elysia } from "elysia";
import { ProblemError } from "../shared/problem.ts";
import { checkBearer, type AuthenticatedToken } from "./service.ts";

/** unauthorized is the 401 problem, with the WWW-Authenticate challenge and any extra headers. */
export function unauthorized(detail: string, headers: Record<string, string> = {}): ProblemError {
  return new ProblemError(401, "unauthorized", detail, undefined, { "www-authenticate": 'Bearer realm="crm"', ...headers });
}

/** bearerAuth resolves `token` for every route it is applied to, or answers 401 with WWW-Authenticate. */
export function bearerAuth(db: Database) {
  return new Elysia({ name: "bearer-auth" }).resolve({ as: "scoped" }, ({ request }): { token: AuthenticatedToken } => {
    const check = checkBearer(db, request);
    if (!check.token) throw unauthorized(check.failure);
    return { token: check.token };
  });
}
