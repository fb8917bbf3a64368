import type { BatchResult } from "../batch/model.ts";
import type { FieldError } from "../shared/problem.ts";

/**
 * ImportError stops an import with a message for the operator (a refused token, an unreachable
 * server); `resumable` unless running the same command again cannot get further.
 */
export class ImportError extends Error {
  constructor(
    message: string,
    readonly resumable = true,
  ) {
    super(message);
  }
}

const MAX_FAILED_ATTEMPTS = 6;

/**
 * shownLocation is a redirect's Location as the importer prints it: resolved against the request's
 * URL, its origin and path only. Its credentials and query string (a signed URL, a login page's
 * token) would stay in the terminal's scrollback and a CI job's log.
 */
function shownLocation(location: string, requestUrl: string): string {
  if (!URL.canParse(location, requestUrl)) return `an unreadable Location (${location.length} characters)`;
  const url = new URL(location, requestUrl);
  // A scheme with no origin (mailto:, javascript:) is named alone: all the rest is its "path".
  const shown = url.origin === "null" ? url.protocol : `${url.origin}${url.pathname}`.slice(0, 200);
  return url.search === "" ? shown : `${shown} (its query string left out)`;
}

type Answer = { type?: string; detail?: string; errors?: FieldError[]; data?: BatchResult[] };

/** parsedAnswer reads a JSON answer, or null: a proxy's "Bad Gateway" page may be labelled JSON. */
function parsedAnswer(response: Response, text: string): Answer | null {
  if (!response.headers.get("content-type")?.includes("json") || !text) return null;
  try {
    return JSON.parse(text) as Answer;
  } catch {
    return null;
  }
}

/**
 * BatchClient sends batch upserts to a CRM server the way the contract asks: every batch with
 * its Idempotency-Key, so a retry (after a timeout, a 5xx, a lost connection or a crash of the
 * importer) can never apply it twice; 429 and 409 (key still in use) wait for Retry-After.
 */
export class BatchClient {
  constructor(
    private readonly baseUrl: string,
    private readonly token: string,
    private readonly onWait: (seconds: number, why: string) => void = () => {},
  ) {}

  /**
   * upsert posts one batch to `path` (e.g. /public/v1/contacts/batch), with `options` beside its
   * items, and returns its per-item results; `replayed` when the server answered with what an
   * earlier run of the same batch got.
   */
  async upsert(path: string, items: unknown[], idempotencyKey: string, options: Record<string, unknown> = {}): Promise<{ results: BatchResult[]; replayed: boolean }> {
    const body = JSON.stringify({ ...options, items });
    let failures = 0;
    for (;;) {
      let response: Response;
      try {
        response = await fetch(`${this.baseUrl}${path}`, {
          method: "POST",
          headers: { authorization: `Bearer ${this.token}`, "content-type": "application/json", "idempotency-key": idempotencyKey },
          body,
          // The API never redirects: followed, a redirect would send the rows to whatever origin it
          // names (without the token), and take its answer for the CRM's.
          redirect: "manual",
        });
      } catch (error) {
        if (++failures >= MAX_FAILED_ATTEMPTS) throw new ImportError(`cannot reach ${this.baseUrl}: ${(error as Error).message}`);
        await this.wait(2 ** failures / 4, `cannot reach the server (${(error as Error).message})`);
        continue;
      }
      let text: string;
      try {
        text = await response.text();
      } catch (error) {
        if (++failures >= MAX_FAILED_ATTEMPTS) throw new ImportError(`${path}: the answer broke off: ${(error as Error).message}`);
        await this.wait(2 ** failures / 4, `the answer broke off (${(error as Error).message})`);
        continue;
      }
      if (response.status >= 300 && response.status < 400) {
        const location = response.headers.get("location");
        throw new ImportError(
          `${path} answered ${response.status}, a redirect${location === null ? "" : ` to ${shownLocation(location, `${this.baseUrl}${path}`)}`}, not followed: the API never redirects, so --url names something else (a proxy, a moved host); point --url at the CRM server itself`,
          false,
        );
      }
      const answer = parsedAnswer(response, text);
      if (response.status === 429 || (response.status === 409 && answer?.type === "urn:crm:problem:idempotency-key-in-use")) {
        await this.wait(Math.max(1, Number(response.headers.get("retry-after")) || 1), response.status === 429 ? "rate limited" : "the same batch is still running");
        continue;
      }
      if (response.status >= 500) {
        if (++failures >= MAX_FAILED_ATTEMPTS) throw new ImportError(`${path} answered ${response.status}: ${answer?.detail ?? text.slice(0, 200)}`);
        await this.wait(Number(response.headers.get("retry-after")) || 2 ** failures / 4, `the server answered ${response.status}`);
        continue;
      }
      if (response.status === 422 && answer?.type === "urn:crm:problem:idempotency-key-reused") {
        // Batch keys come from the file's name, size and mapping: the same command would be refused
        // again. An older importer sent the same keys with other bodies (no merge_custom_fields or add_account_ids).
        throw new ImportError(
          `${path} answered 422 idempotency-key-reused: the file changed since an earlier import of a file with its name and size (in the last 24 h), or that import was begun by an older crm; give a changed file a new name and import it again, and finish an older crm's import with that crm`,
          false,
        );
      }
      if (response.status !== 200 || !answer?.data) {
        // Any other answer would be the same for the same command: running it again would not get further.
        const fields = (answer?.errors ?? []).map((e) => ` ${e.pointer ?? e.header ?? e.parameter}: ${e.detail}`).join(";");
        const hint = response.status === 401 ? " Check that --token-file holds a current token of this server (crm token list)." : "";
        throw new ImportError(`${path} answered ${response.status}: ${answer?.detail ?? text.slice(0, 200)}${fields}${hint}`, false);
      }
      // A proxy between could answer for the server: a batch's results must be one per item.
      if (answer.data.length !== items.length) throw new ImportError(`${path} answered ${answer.data.length} results for ${items.length} items; nothing after this batch was sent`);
      return { results: answer.data, replayed: response.headers.get("idempotent-replayed") === "true" };
    }
  }

  private async wait(seconds: number, why: string): Promise<void> {
    this.onWait(seconds, why);
    await Bun.sleep(seconds * 1000);
  }
}
