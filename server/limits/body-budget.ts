import { requestSlot } from "../http/request-slot.ts";
import { ProblemError } from "../shared/problem.ts";
import { MAX_BODY_BYTES } from "./limits.ts";

/**
 * declaresBody tells from the headers whether a request carries a body (a length or chunked
 * framing). Read this rather than request.body, which has Bun set up a stream for every POST.
 */
function declaresBody(request: Request): boolean {
  return request.headers.has("content-length") || request.headers.has("transfer-encoding");
}

/** budgetOf finds the budget a request's body is counted in, for chargeBody. */
const budgetOf = requestSlot<BodyBudget>("body budget");

/**
 * BodyBudget bounds the request body bytes held in memory at once, all requests together. Bun
 * buffers a body as it arrives, before the app reads it, so a declared Content-Length is taken
 * from the budget when the request head is in, and a request that would pass the budget is
 * refused at once (503, connection closed) before its body arrives; so slow bodies on many
 * connections cannot exhaust memory. A body without a declared length (chunked) is read as a
 * stream and charged chunk by chunk as it is read (chargeBody).
 */
export class BodyBudget {
  private used = 0;
  private readonly held = requestSlot<number>("body bytes held");

  /** @param maxBytes body bytes held at once */
  constructor(readonly maxBytes: number) {}

  /**
   * admit takes the budget for a request's declared body, at most `limit` (its path's largest body);
   * it throws 503 when the body would pass the budget.
   */
  admit(request: Request, limit = MAX_BODY_BYTES): void {
    if (!declaresBody(request)) return;
    budgetOf.set(request, this);
    const declared = request.headers.get("content-length");
    // A declared length past the limit is refused with 413 when read; it never holds more than that.
    if (declared !== null) this.take(request, Math.min(Number(declared) || 0, limit));
  }

  /** release gives back what a request's body held, once its answer is sent. */
  release(request: Request): void {
    const bytes = this.held.get(request);
    if (bytes === undefined) return;
    this.held.delete(request);
    this.used -= bytes;
  }

  /** take adds bytes to what a request holds, or throws 503 when they would pass the budget. */
  take(request: Request, bytes: number): void {
    if (bytes === 0) return;
    if (this.used + bytes > this.maxBytes) {
      throw new ProblemError(
        503,
        "body-buffer-full",
        `The server holds its limit of ${this.maxBytes / 1024 / 1024} MiB of request bodies in memory. Retry shortly.`,
        undefined,
        { "retry-after": "1", connection: "close" },
      );
    }
    this.used += bytes;
    this.held.set(request, (this.held.get(request) ?? 0) + bytes);
  }

  /** inUse is the body bytes held now. */
  get inUse(): number {
    return this.used;
  }
}

/** chargeBody counts a chunk of a body read without a declared length against its request's budget (503 past it); a request outside any budget is not counted. */
export function chargeBody(request: Request, bytes: number): void {
  budgetOf.get(request)?.take(request, bytes);
}
