import { Type } from "@sinclair/typebox";
import { t } from "elysia";

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
    type: `urn:crm:problem:${slug}`,
    title: TITLES[status] ?? "Error",
    status,
    detail,
    ...(errors && errors.length > 0 ? { errors } : {}),
    ...extensions,
  };
}

/** problemResponse serialises a problem document as application/problem+json. */
export function problemResponse(body: Problem, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
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
    type: t.String({ description: "URN naming the error kind, e.g. urn:crm:problem:validation" }),
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
  },
  { additionalProperties: true, description: "RFC 9457 problem details (application/problem+json)" },
);

/** problemResponses lists the problem responses a route can give, for its OpenAPI `response` map. */
export function problemResponses(...statuses: number[]): Record<number, typeof ProblemSchema> {
  return Object.fromEntries(statuses.map((s) => [s, ProblemSchema]));
}
