import { createHmac } from "node:crypto";
import { connect, type Socket } from "node:net";
import { cutTo, withoutNul } from "../shared/text.ts";
import { VERSION } from "../version.ts";
import { addressAsHost, addressesToTry, pinTarget, resolveTarget, TargetRefused, type Network, type PrivateTargets } from "./targets.ts";
import { errorCode } from "../shared/thrown.ts";
import { redirectError } from "./attempt-errors.ts";

/**
 * RESPONSE_HEADERS_KEPT are the response headers recorded with each attempt. Date is not among
 * them: the attempt's start time says when, and a header set that changes every second could not
 * be stored once for the attempts that share it.
 */
const RESPONSE_HEADERS_KEPT = ["content-type", "content-encoding", "content-length", "retry-after", "location", "server", "x-request-id"];

/**
 * HEADER_VALUE_KEPT_CHARACTERS bounds each kept header value (longer ones are cut, ending in "…").
 * A header set is stored once and found again by its text (a unique index), and PostgreSQL's
 * B-tree takes entries of at most 2,704 bytes: seven values of 160 characters, at most 2 bytes
 * each, stay below it with their names. An unbounded one (a 4 KB SSO Location) could not be recorded.
 */
const HEADER_VALUE_KEPT_CHARACTERS = 160;

/**
 * ERROR_KEPT_CHARACTERS bounds an attempt's recorded error (a longer one is cut, ending in "…"). It
 * is repeated in every row of the deliveries list and in delivery.exhausted, and parts of it are the
 * target's to choose: its host name, its addresses, a TLS library's message.
 */
const ERROR_KEPT_CHARACTERS = 1000;

const USER_AGENT = `crm-webhooks/${VERSION}`;
/** SECRET_PREFIX starts every signing secret (Standard Webhooks). */
export const SECRET_PREFIX = "whsec_";

export interface AttemptRequest {
  deliveryId: string;
  targetUrl: string;
  /** signing secrets, newest first: two during a rotation's grace period */
  secrets: string[];
  payload: string;
  timeoutMs: number;
  /** how many bytes of the receiver's answer are kept (--delivery-response-body-bytes) */
  responseBodyBytes: number;
  /** the non-public addresses the target may use (--allow-private-targets) */
  allowPrivateTargets: PrivateTargets;
  /** resolves the target's host; the attempt connects to the address it gives */
  network: Network;
  /**
   * aborts the attempt: when the server gives up waiting for it on shutdown, or with an
   * AttemptInterrupted, whose message is then recorded as the attempt's error
   */
  signal: AbortSignal;
  /** told the moment the request is handed to the network (after the address check), if it is */
  onSend?: () => void;
}

/** AttemptInterrupted is the reason an attempt is aborted with to end it as failed, its message saying why. */
export class AttemptInterrupted extends Error {}

/** AttemptResult is everything recorded about one attempt, and the address a refusal was about. */
export interface AttemptResult {
  started_at: number;
  duration_ms: number;
  request_headers: Record<string, string>;
  response_status: number | null;
  response_headers: Record<string, string>;
  response_body: string | null;
  error: string | null;
  /** delay the receiver asked for with Retry-After, in milliseconds */
  retry_after_ms: number | null;
  /** the non-public address the target's name resolved to when the attempt was refused for it; logged for the operator, not recorded */
  refused_address: string | null;
  /**
   * the receiver gave no complete answer: the attempt timed out, or no connection to it worked (not
   * a refused address, nor an attempt interrupted here); the delivery loop sends it fewer at once
   */
  unanswered: boolean;
  /** the code of a failure here, before reaching the receiver (localFaultOf), else null: such an attempt spends no attempt and says nothing of the receiver */
  local_fault: string | null;
}

/** signPayload returns the Standard Webhooks signature `v1,<base64 HMAC-SHA256 of id.timestamp.body>`. */
export function signPayload(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, "base64");
  return `v1,${createHmac("sha256", key).update(`${id}.${timestamp}.`).update(body).digest("base64")}`;
}

/** SigningState is what signingSecrets reads of a subscription. */
interface SigningState {
  secret: string;
  previous_secret: string | null;
  previous_secret_expires_at: number | null;
  secret_test_delivery_id: string | null;
}

/**
 * signingSecrets returns the secrets delivery `deliveryId` is signed with at `now`, newest first:
 * the current one, and the previous one while its grace period lasts. The console wizard's test of
 * the rotation is signed with the current one alone: it is to prove that the receiver has the new
 * secret before the previous one is retired, and a receiver still on the previous one would verify
 * the pair. The test is known by the subscription's record of it, committed with the ping, so any
 * instance that sends it signs it alike.
 */
export function signingSecrets(subscription: SigningState, deliveryId: string, now: number): string[] {
  const { secret, previous_secret, previous_secret_expires_at, secret_test_delivery_id } = subscription;
  const graceRunning = previous_secret !== null && previous_secret_expires_at !== null && previous_secret_expires_at > now;
  return graceRunning && secret_test_delivery_id !== deliveryId ? [secret, previous_secret] : [secret];
}

/**
 * HTTP_DATE matches the three forms of an HTTP-date (RFC 9110 5.6.7): IMF-fixdate
 * (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
 * (`Sun Nov  6 08:49:37 1994`). Date.parse alone would read a date into any text with a year in it.
 */
const HTTP_DATE = new RegExp(
  [
    String.raw`^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$`,
    String.raw`^(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), \d{2}-(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)-\d{2} \d{2}:\d{2}:\d{2} GMT$`,
    String.raw`^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ( \d|\d{2}) \d{2}:\d{2}:\d{2} \d{4}$`,
  ].join("|"),
);

/** parseRetryAfter reads Retry-After (seconds or an HTTP-date) as a delay in milliseconds, or null for anything else. */
export function parseRetryAfter(value: string | null, now: number): number | null {
  if (value === null) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  if (!HTTP_DATE.test(text)) return null;
  // asctime has no zone: it is GMT, as every HTTP-date is.
  const date = Date.parse(text.endsWith("GMT") ? text : `${text} GMT`);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

/**
 * readPrefix reads the answer up to `limit` bytes (the rest is not waited for) and decodes it.
 * Bytes that are not UTF-8 become U+FFFD, and so do NUL characters: PostgreSQL's text cannot hold
 * them, and an attempt that could not be recorded would be sent again and again. A short
 * Content-Length is read whole only alone: beside Transfer-Encoding the chunks win, and "1 byte"
 * can go on for gigabytes.
 */
async function readPrefix(response: Response, limit: number): Promise<string> {
  if (!response.body) return "";
  const declared = Number(response.headers.get("content-length"));
  if (declared > 0 && declared <= limit && !response.headers.has("transfer-encoding")) return withoutNul(new TextDecoder().decode(await response.arrayBuffer()));
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let ended = false;
  while (size < limit) {
    const { done, value } = await reader.read();
    if ((ended = done)) break;
    chunks.push(value);
    size += value.byteLength;
  }
  if (!ended) void reader.cancel().catch(() => {});
  // Unless the body ended, streaming mode holds back a character cut in two at the limit instead
  // of decoding it as U+FFFD (the body may go on exactly at the limit).
  return withoutNul(new TextDecoder().decode(Buffer.concat(chunks).subarray(0, limit), { stream: !ended }));
}

/**
 * UNREACHED_WORDS words the failures that leave the receiver unreached at one address: on fetch's
 * own connection only these move an attempt on to the name's next address, as curl and browsers
 * do; a timeout, a failure after connecting (a reset, a TLS refusal) or an HTTP answer ends the
 * attempt: the receiver may have got the request, and its answer is its own. A probe of
 * firstToConnect sends nothing, so any failure of one moves on, these words or its code naming it.
 */
const UNREACHED_WORDS: Record<string, string> = {
  ECONNREFUSED: "connection refused by",
  EHOSTUNREACH: "no route to host",
  ENETUNREACH: "no route to the network of",
  // The address's family has no address on this machine to connect from (IPv6 on an IPv4-only host).
  EADDRNOTAVAIL: "no address of this machine can reach",
};

/** Unreached is an address an attempt could not connect to: `endpoint` is address:port, as the record shows it. */
interface Unreached {
  endpoint: string;
  code: string;
}

/** EveryAddressUnreached ends the race of firstToConnect when no address took a connection: `unreached` names them all. */
class EveryAddressUnreached extends Error {}

/** unreachedCode returns the code of a failure that left the receiver unreached at one address, or null for any other failure. */
function unreachedCode(error: unknown): string | null {
  const code = errorCode(error);
  return code !== undefined && code in UNREACHED_WORDS ? code : null;
}

/** endpointOf writes an address and port as the record shows them. */
const endpointOf = (address: string, port: string | number) => `${addressAsHost(address)}:${port}`;

/** describeUnreached words the addresses an attempt could not connect to, sorted, those that failed alike together. */
function describeUnreached(unreached: Unreached[]): string {
  // Sorted, not in the order tried: a name may give its addresses in another order each time
  // (round-robin DNS), and the same failure must read alike, so the health page counts it as one reason.
  const sorted = unreached.toSorted((a, b) => (a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0));
  const codes = [...new Set(sorted.map((u) => u.code))];
  return codes.map((code) => `${UNREACHED_WORDS[code] ?? "could not connect to"} ${sorted.filter((u) => u.code === code).map((u) => u.endpoint).join(" and ")} (${code})`).join("; ");
}

/**
 * CONNECTION_ATTEMPT_DELAY_MS is how long a connection to one of a name's addresses is waited for
 * before the next address's is started beside it: RFC 8305 section 5's recommended value.
 */
const CONNECTION_ATTEMPT_DELAY_MS = 250;

/**
 * firstToConnect races TCP connections to `addresses` on `port` as Happy Eyeballs does (RFC 8305
 * section 5) and returns the first address to connect: each next address's connection starts
 * CONNECTION_ATTEMPT_DELAY_MS after the one before it, or as soon as that one is unreached, the
 * earlier ones still pending. An address that drops packets silently would otherwise take the
 * attempt's whole timeout before the next was tried. Every connection is closed once one connects:
 * Bun's fetch cannot send on a socket it is given, so the request goes on fetch's own connection to
 * the winner, and no receiver can get it twice. Any failure of a probe leaves its address unreached:
 * no request went out on it, so moving on is safe whatever the kernel said (EACCES or EPERM from a
 * firewall rejecting IPv6, EINVAL from a blackhole route, EHOSTDOWN). Unreached addresses are added
 * to `unreached`; it rejects with EveryAddressUnreached when every address is, or with the signal's reason.
 */
function firstToConnect(addresses: string[], port: number, signal: AbortSignal, unreached: Unreached[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const sockets: Socket[] = [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    let settled = false;
    let failed = 0;
    const settle = (end: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener("abort", abort);
      for (const socket of sockets) socket.destroy();
      end();
    };
    const abort = () => settle(() => reject(signal.reason));
    const start = (next: number) => {
      clearTimeout(timer);
      const address = addresses[next]!;
      const socket = connect({ host: address, port });
      sockets.push(socket);
      socket.once("connect", () => settle(() => resolve(address)));
      socket.on("error", (error) => {
        if (settled) return;
        unreached.push({ endpoint: endpointOf(address, port), code: errorCode(error) ?? error.message });
        if (++failed === addresses.length) return settle(() => reject(new EveryAddressUnreached()));
        // The newest connection failed: the next starts now rather than at the delay.
        if (next === sockets.length - 1 && sockets.length < addresses.length) start(next + 1);
      });
      if (next < addresses.length - 1) timer = setTimeout(() => start(next + 1), CONNECTION_ATTEMPT_DELAY_MS);
    };
    if (signal.aborted) return reject(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    start(0);
  });
}

/** LOCAL_FAULT_CODES are the failures of this machine, not the receiver's: no descriptor was free for the connection (the process's or the system's). */
const LOCAL_FAULT_CODES = new Set(["EMFILE", "ENFILE"]);

/**
 * localFaultOf returns the code of an attempt's failure that lies with this machine (LOCAL_FAULT_CODES),
 * on fetch's connection (`error`) or on a connection raced to another address (`unreachedCodes`), or null.
 */
export function localFaultOf(error: unknown, unreachedCodes: string[]): string | null {
  const code = errorCode(error);
  if (code !== undefined && LOCAL_FAULT_CODES.has(code)) return code;
  return unreachedCodes.find((c) => LOCAL_FAULT_CODES.has(c)) ?? null;
}

/** notTried words the addresses of a name an attempt left untried (past MAX_ADDRESSES_PER_ATTEMPT), or "" for none. */
const notTried = (count: number) => (count === 0 ? "" : `, and ${count} more ${count === 1 ? "address" : "addresses"} not tried`);

function describeError(error: unknown, timedOut: boolean, timeoutMs: number, status: number | null, serverName: string | null): string {
  if (timedOut && status !== null) return `timed out after ${timeoutMs} ms reading the response body (status ${status}); the timeout covers the whole answer`;
  if (timedOut) return `timed out after ${timeoutMs} ms without a complete response`;
  if (error instanceof TargetRefused) return `refused: ${error.message}`;
  const code = errorCode(error);
  // Bun's message for this one is the bare code; the name checked is the URL's, not the address connected to.
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID" && serverName !== null) return `connection failed: the certificate does not name ${serverName} (${code})`;
  // Bun asks "Does the server speak TLS on this port?" of every failed handshake: a plain HTTP
  // port, and one the receiver refused too (no TLS version or client certificate in common, or,
  // for an HTTP/2-only receiver, no HTTP/1.1 among its protocols, the only one Bun's fetch offers).
  if (code === "EPROTO" && serverName !== null) {
    return `connection failed: the TLS handshake failed (${code}): the receiver refused it or does not speak TLS on this port; a receiver that accepts only HTTP/2 refuses it, as deliveries are sent over HTTP/1.1`;
  }
  // Bun's fetch adds advice for developers and the address it connected to: neither helps an operator.
  const text = ((error as Error).message ?? String(error)).replace(/(?: fetching "[^"]*")?\. For more information, pass `verbose: true` in the second argument to fetch\(\)$/, "");
  return `connection failed: ${text}${code && !text.includes(code) ? ` (${code})` : ""}`;
}

/**
 * sendAttempt makes one signed POST of a delivery: it resolves the target's host once, checks the
 * addresses (DNS may have changed since the subscription was created) and sends to the first of
 * the addresses checked (a few of them: addressesToTry) to take a connection, raced as
 * firstToConnect does (the others again, should the request's own connection to it be refused
 * or unreachable), with the original Host header and TLS server name; it follows no
 * redirects, stops at the timeout (which covers every address
 * and reading the answer: a body still arriving then is an error, whatever the status), and keeps
 * the first `responseBodyBytes` of the answer. It never throws: failures come back in words (at
 * most ERROR_KEPT_CHARACTERS), naming the addresses that could not be reached.
 */
export async function sendAttempt(request: AttemptRequest): Promise<AttemptResult> {
  const startedAt = Date.now();
  const started = performance.now();
  const timestamp = Math.floor(startedAt / 1000);
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "user-agent": USER_AGENT,
    "webhook-id": request.deliveryId,
    "webhook-timestamp": String(timestamp),
    // Standard Webhooks: several signatures are separated by spaces; a receiver accepts any that verifies.
    "webhook-signature": request.secrets.map((secret) => signPayload(secret, request.deliveryId, timestamp, request.payload)).join(" "),
  };
  const timeout = AbortSignal.timeout(request.timeoutMs);
  const signal = AbortSignal.any([timeout, request.signal]);
  const result: AttemptResult = {
    started_at: startedAt,
    duration_ms: 0,
    request_headers: headers,
    response_status: null,
    response_headers: {},
    response_body: null,
    error: null,
    retry_after_ms: null,
    refused_address: null,
    unanswered: false,
    local_fault: null,
  };
  let serverName: string | null = null;
  const unreached: Unreached[] = [];
  let untried = 0;
  try {
    const target = new URL(request.targetUrl);
    // The timeout covers the name's lookup too.
    const resolved = await resolveTarget(target.hostname, request.network.resolve, request.allowPrivateTargets, signal);
    const addresses = addressesToTry(resolved);
    untried = resolved.length - addresses.length;
    const port = target.port || (target.protocol === "https:" ? "443" : "80");
    request.onSend?.();
    let candidates = addresses;
    let response: Response | undefined;
    while (response === undefined) {
      // One address is connected to by fetch alone, as cheap as a plain fetch: there is nothing to race.
      const address = candidates.length === 1 ? candidates[0]! : await firstToConnect(candidates, Number(port), signal, unreached);
      // The Host header and TLS server name are the URL's, whichever address is connected to.
      const pinned = pinTarget(target, address);
      serverName = pinned.serverName ?? (target.protocol === "https:" ? target.hostname.replace(/^\[|\]$/g, "") : null);
      const tls = pinned.serverName === null && request.network.ca === undefined ? undefined : { serverName: pinned.serverName ?? undefined, ca: request.network.ca };
      try {
        response = await fetch(pinned.url, {
          method: "POST",
          // The answer is asked for uncompressed and read as sent: decompressed, a few hundred bytes
          // could unpack to gigabytes, and only the first responseBodyBytes are kept anyway.
          headers: { ...headers, "accept-encoding": "identity", ...(pinned.host === null ? {} : { host: pinned.host }) },
          body: request.payload,
          decompress: false,
          tls,
          redirect: "manual",
          signal,
        });
      } catch (error) {
        const code = unreachedCode(error);
        if (code === null) throw error;
        unreached.push({ endpoint: endpointOf(address, port), code });
        // The request was never sent: an address that took the probe and refuses fetch's own
        // connection a moment later (a receiver restarting, a balancer's backend down) leaves the
        // others to try, in the time left.
        const failed = new Set(unreached.map((u) => u.endpoint));
        candidates = candidates.filter((a) => !failed.has(endpointOf(a, port)));
        if (candidates.length === 0) throw error;
      }
    }
    result.response_status = response.status;
    for (const name of RESPONSE_HEADERS_KEPT) {
      const value = response.headers.get(name);
      if (value !== null) result.response_headers[name] = cutTo(value, HEADER_VALUE_KEPT_CHARACTERS);
    }
    result.retry_after_ms = parseRetryAfter(response.headers.get("retry-after"), Date.now());
    // 304 Not Modified is in the 3xx class but sends nowhere: it fails as a 4xx would.
    if (response.status >= 300 && response.status < 400 && response.status !== 304) {
      result.error = redirectError(response.status, result.response_headers.location !== undefined);
    }
    result.response_body = await readPrefix(response, request.responseBodyBytes);
  } catch (error) {
    const interruption: unknown = request.signal.reason;
    if (error instanceof TargetRefused) result.refused_address = error.address;
    const localFault = localFaultOf(error, unreached.map((u) => u.code));
    if (interruption instanceof AttemptInterrupted) result.error = interruption.message;
    else if (localFault !== null) {
      result.local_fault = localFault;
      result.error = `not sent: this server is out of file descriptors (${localFault}); the receiver was not contacted, and the delivery is tried again shortly without spending an attempt`;
    }
    // Every address tried was unreached: the record names them all, and counts those not tried.
    else if (error instanceof EveryAddressUnreached || unreachedCode(error) !== null) result.error = `connection failed: ${describeUnreached(unreached)}${notTried(untried)}`;
    else result.error = `${describeError(error, timeout.aborted, request.timeoutMs, result.response_status, serverName)}${unreached.length > 0 ? `; before it, ${describeUnreached(unreached)}` : ""}`;
    result.unanswered = !request.signal.aborted && !(error instanceof TargetRefused) && result.local_fault === null && (timeout.aborted || result.response_status === null);
  }
  if (result.error !== null) result.error = cutTo(result.error, ERROR_KEPT_CHARACTERS);
  result.duration_ms = Math.round((performance.now() - started) * 100) / 100;
  return result;
}
