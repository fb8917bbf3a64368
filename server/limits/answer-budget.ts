import type { Config } from "../config.ts";
import { ProblemError } from "../shared/problem.ts";

/**
 * ANSWER_PIECE_BYTES is the size of the pieces a large answer is sent in, and the length (in
 * characters) from which an answer counts as large. A shorter answer, at most three times this as
 * UTF-8, is handed to the socket whole: the kernel's send buffer takes most of it at once, and
 * --max-connections bounds how many there are.
 */
export const ANSWER_PIECE_BYTES = 64 * 1024;

/** ANSWER_RETRY_AFTER_SECONDS is the Retry-After of a refused answer: a reading client takes a page in well under a second. */
const ANSWER_RETRY_AFTER_SECONDS = 1;

/** mib writes a byte count in MiB as the answers do ("16 MiB", "0.5 MiB"). */
const mib = (bytes: number) => `${Math.round((bytes / 1024 / 1024) * 10) / 10} MiB`;

/**
 * AnswerBudget bounds the bytes of answers the service holds in memory until the client's socket
 * takes them, all clients together and per client. Bun copies whatever part of a body the socket
 * does not take into a buffer of its own, the whole of it for a client that reads nothing, so a
 * large answer is sent as a stream of pieces instead (budgetedBody), which Bun pulls one at a time as
 * the socket drains: the pieces not yet pulled are all the service holds of it, and each is given
 * back as it is pulled, the rest when the client goes away (Bun cancels the stream, also when its
 * idle timer closes a connection that takes nothing). An answer that would pass the budget is
 * refused before it is sent: 503 when all clients together hold it, 429 when its own client holds
 * its share; only a GET's, as any other request's answer comes after what it did, which the
 * client, told to retry, would do again (without an Idempotency-Key: a second account). An answer is always let in for a client that holds nothing, and when nothing is held
 * at all, so one larger than a share, or than the whole budget, is still served.
 */
export class AnswerBudget {
  private used = 0;
  private readonly perClient = new Map<string, number>();

  /**
   * @param maxBytes answer bytes held at once, all clients together
   * @param share answer bytes one client may hold
   */
  constructor(
    readonly maxBytes: number,
    readonly share: number,
  ) {}

  /**
   * take charges `bytes` of an answer to `client`, or throws 429 or 503 when they would pass its
   * share or the budget and the answer is `refusable`.
   */
  take(client: string, bytes: number, refusable: boolean): void {
    const held = this.perClient.get(client) ?? 0;
    if (refusable && held > 0 && held + bytes > this.share) throw this.answersUnread();
    if (refusable && this.used > 0 && this.used + bytes > this.maxBytes) {
      throw new ProblemError(
        503,
        "answer-buffer-full",
        `The server holds its limit of ${mib(this.maxBytes)} of answers not yet read by their clients; this answer is ${mib(bytes)}. Retry after the Retry-After seconds.`,
        undefined,
        { "retry-after": String(ANSWER_RETRY_AFTER_SECONDS) },
      );
    }
    this.used += bytes;
    this.perClient.set(client, held + bytes);
  }

  /**
   * refuseWhileNearShare throws the 429 take would throw for any large answer (ANSWER_PIECE_BYTES
   * or more) while `client` holds too much of its share for one: called before a list is read, so
   * a client that reads nothing makes the server build no page only to drop it.
   */
  refuseWhileNearShare(client: string): void {
    const held = this.perClient.get(client) ?? 0;
    if (held > 0 && held + ANSWER_PIECE_BYTES > this.share) throw this.answersUnread();
  }

  /**
   * answersUnread is the 429 of an answer refused for its client's share, the same before a list is
   * read as once an answer is built (its size is not told: a list refused before has none yet). The
   * client's own doing, and its own requests alone are refused: 429, which a proxy does not retry on
   * another instance as it may a 503.
   */
  private answersUnread(): ProblemError {
    return new ProblemError(
      429,
      "answers-unread",
      `This client has answers the server still holds, not yet read, too near its share of ${mib(this.share)} (an eighth of --answer-buffer-max-mb) for this answer. Read the answers already asked for, then retry after the Retry-After seconds.`,
      undefined,
      { "retry-after": String(ANSWER_RETRY_AFTER_SECONDS) },
    );
  }

  /** release gives back `bytes` of `client`'s answers, sent or abandoned. */
  release(client: string, bytes: number): void {
    this.used -= bytes;
    const held = (this.perClient.get(client) ?? bytes) - bytes;
    if (held > 0) this.perClient.set(client, held);
    else this.perClient.delete(client);
  }

  /** inUse is the answer bytes held now. */
  get inUse(): number {
    return this.used;
  }
}

/** answerBudget is the budget --answer-buffer-max-mb sets, each client's share an eighth of it. */
export function answerBudget(config: Pick<Config, "answerBufferMaxMb">): AnswerBudget {
  const bytes = config.answerBufferMaxMb * 1024 * 1024;
  return new AnswerBudget(bytes, bytes / 8);
}

/** largeTexts holds the text of each large answer built by textResponse, for the answer budget to send it in pieces in its stead. */
const largeTexts = new WeakMap<Response, string>();

/**
 * textResponse is `new Response(text, init)` for an answer a route or error handler builds whole
 * (a console page, a problem, an idempotent replay): one of ANSWER_PIECE_BYTES characters or more
 * is charged to the answer budget and sent in pieces as a route's text or JSON is.
 */
export function textResponse(text: string, init?: ResponseInit): Response {
  const response = new Response(text, init);
  if (text.length >= ANSWER_PIECE_BYTES) largeTexts.set(response, text);
  return response;
}

/** largeTextOf is the text of a large answer textResponse built, undefined for any other Response. */
export function largeTextOf(response: Response): string | undefined {
  return largeTexts.get(response);
}

/**
 * encodeInPieces writes text as UTF-8 in pieces of at most ANSWER_PIECE_BYTES, each a buffer of
 * its own (freed once sent), never splitting a character: a piece ends before a surrogate pair
 * that would not fit whole.
 */
function encodeInPieces(text: string): Uint8Array[] {
  const encoder = new TextEncoder();
  const pieces: Uint8Array[] = [];
  for (let read = 0; read < text.length; ) {
    let end = Math.min(read + ANSWER_PIECE_BYTES, text.length);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    const piece = new Uint8Array(ANSWER_PIECE_BYTES);
    const { read: taken, written } = encoder.encodeInto(text.slice(read, end), piece);
    pieces.push(written === piece.length ? piece : piece.subarray(0, written));
    read += taken;
  }
  return pieces;
}

/**
 * budgetedBody charges a large answer's text to `client` (429 or 503 past the budget when
 * `refusable`: take) and returns the body that sends it piece by piece, giving each piece's bytes
 * back as Bun pulls it, and the pieces not sent when the stream is cancelled.
 */
export function budgetedBody(budget: AnswerBudget, client: string, text: string, refusable: boolean): ReadableStream<Uint8Array> {
  budget.take(client, Buffer.byteLength(text), refusable);
  const pieces: (Uint8Array | undefined)[] = encodeInPieces(text);
  let next = 0;
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        const piece = pieces[next]!;
        pieces[next++] = undefined;
        budget.release(client, piece.byteLength);
        controller.enqueue(piece);
        if (next === pieces.length) controller.close();
      },
      cancel() {
        let unsent = 0;
        for (; next < pieces.length; next++) unsent += pieces[next]!.byteLength;
        pieces.length = 0;
        budget.release(client, unsent);
      },
    },
    // Pulled only when Bun has written the previous piece to the socket: nothing is queued ahead.
    { highWaterMark: 0 },
  );
}
