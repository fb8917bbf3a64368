import { Type } from "@sinclair/typebox";
import { t } from "elysia";
import { openEnum } from "../http/openapi-docs.ts";
import { textResponse } from "../limits/answer-budget.ts";

export interface FieldError {
  /** JSON pointer into the request body */
  pointer?: string;
  /** query or path parameter name */
  parameter?: string;
  /** request header name */
  header?: string;
  detail: string;
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors?: FieldError[];
  [extension: string]: unknown;
}

const TITLES: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  410: "Gone",
  412: "Precondition Failed",
  413: "Content Too Large",
  414: "URI Too Long",
  415: "Unsupported Media Type",
  422: "Unprocessable Content",
  429: "Too Many Requests",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  503: "Service Unavailable",
};

/**
 * PROBLEM_TYPES are the slugs of every problem type the API sends, in the order of README's
 * Problem types table, which says what each means and what a client should do. The OpenAPI
 * document's Problem.type lists them; test/docs/problem-types.test.ts keeps this list equal to
 * the types the code builds and to the table. Console pages' own types are not here: no client
 * of the API can receive them.
 */
export const PROBLEM_TYPES = [
  "invalid-json",
  "invalid-host",
  "invalid-request-target",
  "incomplete-body",
  "bad-request",
  "unauthorized",
  "browser-request",
  "forbidden",
  "not-found",
  "method-not-allowed",
  "body-timeout",
  "idempotency-key-in-use",
  "external-id-taken",
  "user-exists",
  "subscription-disabled",
  "subscription-paused",
  "subscription-deleted",
  "secret-rotation-required",
  "delivery-in-progress",
  "event-erased",
  "record-not-deleted",
  "deletions-expired",
  "replay-secret-lost",
  "replay-resource-deleted",
  "precondition-failed",
  "body-too-large",
  "uri-too-long",
  "unsupported-media-type",
  "validation",
  "idempotency-key-reused",
  "rate-limited",
  "answers-unread",
  "headers-too-large",
  "internal",
  "storage-full",
  "storage-read-only",
  "storage-failed",
  "database-replaced",
  "database-unavailable",
  "database-busy",
  "database-newer",
  "secrets-key-replaced",
  "too-many-connections",
  "body-buffer-full",
  "answer-buffer-full",
  "slow-lists-busy",
  "manual-attempts-busy",
  "subscription-attempts-busy",
  "out-of-descriptors",
  "shutting-down",
  "not-ready",
] as const;

/** problemTypeUrn is the `type` of a problem document of a slug: urn:crm:problem:SLUG. */
export function problemTypeUrn(slug: string): string {
  return `urn:crm:problem:${slug}`;
}

/** ProblemError is thrown anywhere to answer with an RFC 9457 problem response. */
export class ProblemError extends Error {
  constructor(
    readonly status: number,
    readonly slug: string,
    detail: string,
    readonly errors?: FieldError[],
    readonly headers: Record<string, string> = {},
    readonly extensions: Record<string, unknown> = {},
  ) {
    super(detail);
  }

  /** toProblem renders the error as a problem document. */
  toProblem(): Problem {
    return problem(this.status, this.slug, this.message, this.errors, this.extensions);
  }
}

/** problem builds a problem document whose type is a stable URN naming the error. */
export function problem(status: number, slug: string, detail: string, errors?: FieldError[], extensions: Record<string, unknown> = {}): Problem {
  return {
    type: problemTypeUrn(slug),
    title: TITLES[status] ?? "Error",
    status,
    detail,
    ...(errors && errors.length > 0 ? { errors } : {}),
    ...extensions,
  };
}

/** problemResponse serialises a problem document as application/problem+json. */
export function problemResponse(body: Problem, headers: Record<string, string> = {}): Response {
  return textResponse(JSON.stringify(body), {
    status: body.status,
    headers: { "content-type": "application/problem+json", ...headers },
  });
}

/** validationProblem is the 422 thrown when request fields are invalid. */
export function validationProblem(errors: FieldError[], detail = "The request has invalid fields."): ProblemError {
  return new ProblemError(422, "validation", detail, errors);
}

/** notFound is the 404 for a resource id that does not exist. */
export function notFound(kind: string, id: string): ProblemError {
  return new ProblemError(404, "not-found", `No ${kind} with id ${JSON.stringify(id)} exists.`);
}

/** ProblemSchema documents the problem+json body in OpenAPI. */
export const ProblemSchema = t.Object(
  {
    type: openEnum(PROBLEM_TYPES.map(problemTypeUrn), {
      description: "URN naming the error kind; README's Problem types table says what each means and what to do. New types may be added: handle one you do not know by its status.",
    }),
    title: t.String(),
    // Elysia's t.Integer also accepts numeric strings (for query input); the document states a JSON integer.
    status: Type.Integer(),
    detail: t.String(),
    errors: t.Optional(
      t.Array(
        t.Object({
          pointer: t.Optional(t.String({ description: "JSON pointer into the request body" })),
          parameter: t.Optional(t.String({ description: "query or path parameter" })),
          header: t.Optional(t.String({ description: "request header" })),
          detail: t.String(),
        }),
      ),
    ),
    // The extension members README's Problem types table tells clients to use, each on the types that name it.
    current_version: t.Optional(Type.Integer({ description: "precondition-failed (412) of a contact or account: the version stored now, also the answer's ETag; read it again, then retry." })),
    retained_since: t.Optional(t.String({ format: "date-time", description: "deletions-expired (410): the earliest `since` still answered; deletions before it may be gone, so resync in full." })),
    subscription_id: t.Optional(t.String({ description: "replay-secret-lost (410): the subscription the replayed request created or rotated; it exists (unless deleted since)." })),
    contact_id: t.Optional(t.String({ description: "replay-resource-deleted (410): the contact the replayed answer showed, deleted since." })),
    account_id: t.Optional(t.String({ description: "replay-resource-deleted (410): the account the replayed answer showed, deleted since." })),
    user_id: t.Optional(t.String({ description: "replay-resource-deleted (410): the user the replayed answer showed, deleted since." })),
    checks: t.Optional(
      t.Record(t.String(), t.String(), {
        description:
          "not-ready (503, /readyz): each readiness check's verdict by name (database, migrations, delivery_loop): ok, or a short code of what is wrong (storage-fault, unavailable, login-refused, no-answer, pending-migrations, newer-migrations, tables-missing, not-running, claims-failing...).",
      }),
    ),
    reasons: t.Optional(t.Record(t.String(), t.String(), { description: "not-ready (503, /readyz), to a request GET /metrics would answer (the metrics token, or loopback) only: each failing check's reason in words." })),
  },
  { additionalProperties: true, description: "RFC 9457 problem details (application/problem+json)" },
);

/** problemResponses lists the problem responses a route can give, for its OpenAPI `response` map. */
export function problemResponses(...statuses: number[]): Record<number, typeof ProblemSchema> {
  return Object.fromEntries(statuses.map((s) => [s, ProblemSchema]));
}
