import type { Database } from "bun:sqlite";
import { Elysia } from "elysia";
import { ProblemError } from "../http/problem.ts";
import { authenticateBearer, type AuthenticatedToken } from "./service.ts";

function unauthorized(detail: string): ProblemError {
  return new ProblemError(401, "unauthorized", detail, undefined, { "www-authenticate": 'Bearer realm="crm"' });
}

/** bearerAuth resolves `token` for every route it is applied to, or answers 401 with WWW-Authenticate. */
export function bearerAuth(db: Database) {
  return new Elysia({ name: "bearer-auth" }).resolve({ as: "scoped" }, ({ headers }): { token: AuthenticatedToken } => {
    const header = headers.authorization;
    if (!header) throw unauthorized("Send an API token in the Authorization header: Authorization: Bearer <token>.");
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) throw unauthorized("The Authorization header must use the Bearer scheme: Authorization: Bearer <token>.");
    const token = authenticateBearer(db, match[1]!);
    if (!token) throw unauthorized("The API token is unknown or revoked.");
    return { token };
  });
}
