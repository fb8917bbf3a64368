import { ProblemError } from "../shared/problem.ts";
import { MAX_BODY_BYTES } from "./limits.ts";

/**
 * BodyBudget bounds the request body bytes held in memory at once, all requests together. Bun
 * buffers a body as it arrives, before the app reads it, so the budget is taken when the request
 * head is in: a body's declared Content-Length, or for a body without one (chunked) the largest
 * body accepted. A request that would pass the budget is refused at once (503, connection
 * closed), before its body arrives; so slow bodies on many connections cannot exhaust memory.
 */
export class BodyBudget {
  private used = 0;
  private readonly held = new WeakMap<Request, number>();

  /** @param maxBytes body bytes held at once */
  constructor(readonly maxBytes: number) {}

  /** admit takes the budget for a request's body; it throws 503 when the body would pass it. */
  admit(request: Request): void {
    if (!request.body) return;
    const declared = request.headers.get("content-length");
    // A declared length past 1 MiB is refused with 413 when read; it never holds more than that.
    const bytes = declared === null ? MAX_BODY_BYTES : Math.min(Number(declared) || 0, MAX_BODY_BYTES);
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
    this.held.set(request, bytes);
  }

  /** release gives back what a request's body held, once its answer is sent. */
  release(request: Request): void {
    const bytes = this.held.get(request);
    if (bytes === undefined) return;
    this.held.delete(request);
    this.used -= bytes;
  }

  /** inUse is the body bytes held now. */
  get inUse(): number {
    return this.used;
  }
}
