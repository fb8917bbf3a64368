import { chargeBody } from "../limits/body-budget.ts";
import { BUN_TIMER_GRANULARITY_SECONDS, byteSize, MAX_BODY_BYTES } from "../limits/limits.ts";
import { ProblemError } from "../shared/problem.ts";
import { holdIdleTimer, type IdleTimer } from "./idle-timer.ts";
import { parseSafeJson } from "./safe-json.ts";

const utf8 = new TextDecoder("utf-8", { fatal: true });

function bodyTimedOut(timeoutMs: number): ProblemError {
  return new ProblemError(408, "body-timeout", `The request body did not arrive within ${timeoutMs} ms.`, undefined, { connection: "close" });
}

function decodeBody(bytes: Uint8Array | ArrayBuffer): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new ProblemError(400, "invalid-json", "The request body is not valid UTF-8.");
  }
}

/** BodyWait is how long a request's body may take to arrive, and what the connection waits under once it has. */
export interface BodyWait extends IdleTimer {
  timeoutMs: number;
}

/**
 * holdConnectionOpen moves Bun's idle timer a tick past the body's deadline while the body arrives,
 * and returns what puts it back: the timer runs meanwhile and fires up to a tick early (an idle
 * timeout of 10 s closes after 8 to 12 s), which would close the connection before its 408.
 */
function holdConnectionOpen(request: Request, wait: BodyWait): () => void {
  return holdIdleTimer(request, wait, Math.ceil(wait.timeoutMs / 1000) + BUN_TIMER_GRANULARITY_SECONDS + 1);
}

/**
 * readDeclaredBody reads a body of a declared length (at most 1 MiB, which the framing enforces)
 * in one call: Bun fills it natively, where a stream reader costs a few microseconds per request (bench/).
 */
async function readDeclaredBody(request: Request, wait: BodyWait): Promise<string> {
  const reading = request.arrayBuffer();
  // A small body is usually in with the request's head, and read at once: no timer is needed.
  const arrived = Bun.peek(reading);
  if (arrived instanceof ArrayBuffer) return decodeBody(arrived);
  const { timeoutMs } = wait;
  const restoreIdleTimer = holdConnectionOpen(request, wait);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), timeoutMs);
  });
  // After a 408 the connection closes and the unfinished read fails; nobody waits for it any more.
  reading.catch(() => {});
  let bytes: ArrayBuffer | null;
  try {
    bytes = await Promise.race([reading, timeout]);
  } catch {
    throw new ProblemError(400, "incomplete-body", "The connection ended before the whole request body arrived.");
  } finally {
    clearTimeout(timer);
    restoreIdleTimer();
  }
  if (bytes === null) throw bodyTimedOut(timeoutMs);
  return decodeBody(bytes);
}

/** readLimitedBody reads at most `limit` bytes of body (1 MiB) as UTF-8 text, and answers 408 if it takes longer than the wait's timeoutMs to arrive. */
export async function readLimitedBody(request: Request, wait: BodyWait, limit = MAX_BODY_BYTES): Promise<string> {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) throw bodyTooLarge(limit);
  if (declared !== null) return readDeclaredBody(request, wait);
  const body = request.body;
  if (!body) return "";
  const { timeoutMs } = wait;
  const restoreIdleTimer = holdConnectionOpen(request, wait);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    reader.cancel().catch(() => {});
  }, timeoutMs);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (timedOut) break;
      if (done) break;
      size += value.byteLength;
      if (size > limit) {
        reader.cancel().catch(() => {});
        throw bodyTooLarge(limit);
      }
      try {
        chargeBody(request, value.byteLength);
      } catch (error) {
        reader.cancel().catch(() => {});
        throw error;
      }
      chunks.push(value);
    }
  } catch (error) {
    if (error instanceof ProblemError) throw error;
    if (!timedOut) throw new ProblemError(400, "incomplete-body", "The connection ended before the whole request body arrived.");
  } finally {
    clearTimeout(timer);
    restoreIdleTimer();
  }
  if (timedOut) throw bodyTimedOut(timeoutMs);
  return decodeBody(Buffer.concat(chunks));
}

function bodyTooLarge(limit: number): ProblemError {
  return new ProblemError(413, "body-too-large", `The request body exceeds the limit of ${limit} bytes (${byteSize(limit)}).`);
}

/**
 * parseJsonBody reads a request body that must be a JSON object, parsed safely (safe-json.ts);
 * problems for anything else.
 */
export async function parseJsonBody(request: Request, wait: BodyWait): Promise<unknown> {
  const [type, ...parameters] = (request.headers.get("content-type") ?? "").split(";");
  const contentType = type!.trim().toLowerCase();
  // A compressed body would be read as if it were the JSON itself: refuse it rather than misread it.
  const encoding = request.headers.get("content-encoding")?.trim().toLowerCase();
  if (encoding && encoding !== "identity") {
    throw new ProblemError(415, "unsupported-media-type", `Content-Encoding ${encoding} is not accepted; send the request body uncompressed.`, undefined, { "accept-encoding": "identity" });
  }
  const text = await readLimitedBody(request, wait);
  if (text === "") return undefined; // no body: routes that need one answer 422 from their schema
  if (contentType !== "application/json" && !contentType.endsWith("+json")) {
    throw new ProblemError(
      415,
      "unsupported-media-type",
      contentType === ""
        ? "Send the request body as JSON with Content-Type: application/json."
        : `Content-Type ${contentType} is not accepted; send application/json.`,
    );
  }
  // JSON between systems is UTF-8 (RFC 8259); a body declared in another charset would be misread.
  const charset = parameters.map((p) => p.trim().toLowerCase()).find((p) => p.startsWith("charset="))?.slice(8).replace(/^"(.*)"$/, "$1");
  // US-ASCII is UTF-8's first 128 characters: such a body reads the same.
  if (charset !== undefined && charset !== "utf-8" && charset !== "utf8" && charset !== "us-ascii") {
    throw new ProblemError(415, "unsupported-media-type", `Content-Type charset ${charset} is not accepted; send the JSON in UTF-8 (charset=utf-8, or no charset).`);
  }
  const value = parseSafeJson(text);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ProblemError(422, "validation", "The request body must be a JSON object.", [{ pointer: "", detail: "must be a JSON object" }]);
  }
  return value;
}
