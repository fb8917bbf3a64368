import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { MAX_EXTRA_PROPERTIES_BYTES, MAX_RELATED_IDS } from "../../server/limits/limits.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { testBackend, type TestBackend } from "../support/backend.ts";
import { Connection } from "./support.ts";
import { waitFor } from "../webhooks/support.ts";

// s36 rate-limits audit: unread pages of contacts with include (6 MB each) grew the server to
// 1.8 GB. Answers not yet taken by their client's socket are held within --answer-buffer-max-mb.

/** BUDGET_MIB is the test server's --answer-buffer-max-mb: an eighth of it, 2 MiB, is one client's share. */
const BUDGET_MIB = 16;
/** PAGE is one contact embedding 100 accounts of 64 KiB: about 6.6 MB, more than Linux's largest send buffer (4 MiB by default) takes of an unread one. */
const PAGE = "/public/v1/contacts?include=accounts&per_page=1";

let running: RunningServer;
let backend: TestBackend;
let dataDir: string;
let port: number;
let token: string;
let pageBytes: number;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "crm-answers-"));
  backend = await testBackend(dataDir);
  running = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error", ...backend.config, answerBufferMaxMb: BUDGET_MIB, rateWriteBurst: 1000 }, createLogger("error", () => {}));
  port = running.server.port!;
  token = (await createApiToken(running.runtime.db, "answers")).token;
  const notes = "x".repeat(MAX_EXTRA_PROPERTIES_BYTES - JSON.stringify({ legacy_notes: "" }).length);
  const ids: string[] = [];
  for (let i = 0; i < MAX_RELATED_IDS; i++) ids.push((await (await api("POST", "/public/v1/accounts", { name: `Account ${i}`, legacy_notes: notes })).json()).data.id);
  expect((await api("POST", "/public/v1/contacts", { email: "ada@example.com", account_ids: ids })).status).toBe(201);
  pageBytes = (await (await api("GET", PAGE)).arrayBuffer()).byteLength;
});

afterAll(async () => {
  await running.stop();
  await backend.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

function api(method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}${path}`, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
}

/** UnreadAnswer is a connection that asked for the page and stopped reading once the answer's head came: its status and headers. */
interface UnreadAnswer {
  socket: Socket;
  status: number;
  headers: Record<string, string>;
  /** the body when it is a refusal (a problem, read whole: it is small) */
  problem: unknown;
}

/** askUnread asks for the page on a new connection from `from` and reads nothing of it past the answer's head (a refusal is read whole). */
function askUnread(from: string): Promise<UnreadAnswer> {
  const socket = connect({ port, host: "127.0.0.1", localAddress: from });
  socket.on("error", () => {});
  let received = "";
  return new Promise((resolve, reject) => {
    socket.on("close", () => reject(new Error(`connection closed; received ${JSON.stringify(received.slice(0, 200))}`)));
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("latin1");
      const end = received.indexOf("\r\n\r\n");
      if (end < 0) return;
      const [statusLine, ...lines] = received.slice(0, end).split("\r\n");
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
      const status = Number(statusLine!.split(" ")[1]);
      // What the server sends of the page from here on stays in the kernel's buffers, then with the server.
      if (status === 200) socket.pause();
      else if (received.length < end + 4 + Number(headers["content-length"])) return;
      socket.removeAllListeners("close");
      resolve({ socket, status, headers, problem: status === 200 ? null : JSON.parse(received.slice(end + 4)) });
    });
    socket.write(`GET ${PAGE} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n\r\n`);
  });
}

/** refusal is what a refused answer shows: status, Retry-After, content type, problem. */
const refusal = (a: UnreadAnswer) => ({ status: a.status, retryAfter: a.headers["retry-after"], type: a.headers["content-type"], connection: a.headers.connection, problem: a.problem });
const mib = (bytes: number) => `${Math.round((bytes / 1024 / 1024) * 10) / 10} MiB`;

test("answers nobody reads are held within --answer-buffer-max-mb: a client past its share gets 429, past the budget 503, a reading client still gets its page, and closed connections give their share back", async () => {
  // One client (127.0.0.2) asks for the page on 4 connections and reads none: its first answer is
  // sent, in pieces as its socket takes them; the others would pass its share.
  const first = await askUnread("127.0.0.2");
  expect({ status: first.status, type: first.headers["content-type"], chunked: first.headers["transfer-encoding"] }).toEqual({ status: 200, type: "application/json;charset=utf-8", chunked: "chunked" });
  const more = [await askUnread("127.0.0.2"), await askUnread("127.0.0.2"), await askUnread("127.0.0.2")];
  for (const answer of more) {
    expect(refusal(answer)).toEqual({
      status: 429,
      retryAfter: "1",
      type: "application/problem+json",
      connection: undefined,
      problem: {
        type: "urn:crm:problem:answers-unread",
        title: "Too Many Requests",
        status: 429,
        detail: "This client has answers the server still holds, not yet read, too near its share of 2 MiB (an eighth of --answer-buffer-max-mb) for this answer. Read the answers already asked for, then retry after the Retry-After seconds.",
      },
    });
  }

  // Another client, which reads, gets the page whole.
  const read = await api("GET", PAGE);
  expect({ status: read.status, bytes: (await read.arrayBuffer()).byteLength }).toEqual({ status: 200, bytes: pageBytes });

  // Clients of further addresses, reading nothing either, take the rest of the budget: then 503.
  const unread = [first];
  let full: UnreadAnswer | undefined;
  for (let host = 3; host < 3 + 2 * BUDGET_MIB && !full; host++) {
    const answer = await askUnread(`127.0.0.${host}`);
    if (answer.status === 200) unread.push(answer);
    else full = answer;
  }
  expect(refusal(full!)).toEqual({
    status: 503,
    retryAfter: "1",
    type: "application/problem+json",
    connection: undefined,
    problem: {
      type: "urn:crm:problem:answer-buffer-full",
      title: "Service Unavailable",
      status: 503,
      detail: `The server holds its limit of 16 MiB of answers not yet read by their clients; this answer is ${mib(pageBytes)}. Retry after the Retry-After seconds.`,
    },
  });

  // The clients go away without reading: each answer's share comes back, and every client is served again.
  for (const answer of [...unread, ...more, full!]) answer.socket.destroy();
  await waitFor(() => running.runtime.answers.inUse === 0, "the answers' shares given back");
  // Two pages fit the budget whatever part of each the kernel took, so both are sent.
  const again = [await askUnread("127.0.0.2"), await askUnread("127.0.0.3")];
  for (const answer of again) answer.socket.destroy();
  expect(again.map((a) => a.status)).toEqual([200, 200]);
});

test("answers built as a Response go through the budget too: an idempotent replay larger than a piece is sent in pieces, with its own status and headers (console pages, problems and /docs are built as it is)", async () => {
  // A new account whose answer is more than a piece: created under an Idempotency-Key, then replayed.
  const notes = "y".repeat(MAX_EXTRA_PROPERTIES_BYTES - JSON.stringify({ legacy_notes: "" }).length);
  const create = () =>
    fetch(`http://127.0.0.1:${port}/public/v1/accounts`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": "large-replay" },
      body: JSON.stringify({ name: "Large replay", legacy_notes: notes }),
    });
  const first = await create();
  const firstText = await first.text();
  const replay = await create();
  const id = JSON.parse(firstText).data.id;
  const sent = (res: Response) => ({ status: res.status, chunked: res.headers.get("transfer-encoding"), length: res.headers.get("content-length"), type: res.headers.get("content-type") });
  expect({ ...sent(replay), replayed: replay.headers.get("idempotent-replayed"), location: replay.headers.get("location"), body: await replay.text() }).toEqual({
    ...sent(first),
    replayed: "true",
    location: `/public/v1/accounts/${id}`,
    body: firstText,
  });
  expect(sent(replay)).toEqual({ status: 201, chunked: "chunked", length: null, type: "application/json;charset=utf-8" });

});

test("a write's answer is sent whatever its client holds unread: refused once the write was made, a client retrying it would make it twice", async () => {
  // 127.0.0.30 holds its whole share of answers unread, as a client that stopped reading pages does.
  const answers = running.runtime.answers;
  answers.take("127.0.0.30", answers.share, false);
  const notes = "z".repeat(MAX_EXTRA_PROPERTIES_BYTES - JSON.stringify({ legacy_notes: "" }).length);
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
  const writer = new Connection(port, "127.0.0.30");
  const created = await writer.request("POST", "/public/v1/accounts", headers, JSON.stringify({ name: "Written once", legacy_notes: notes }));
  const reader = new Connection(port, "127.0.0.30");
  const read = await reader.request("GET", PAGE, headers);
  writer.destroy();
  reader.destroy();
  answers.release("127.0.0.30", answers.share);
  // The account was made: its answer (more than a piece) is sent; a read is refused as before.
  expect({ created: created.status, chunked: created.headers["transfer-encoding"], read: read.status }).toEqual({ created: 201, chunked: "chunked", read: 429 });
  const found = await (await api("GET", `/public/v1/accounts?name=${encodeURIComponent("Written once")}`)).json();
  expect(found.meta.total).toBe(1);
  await waitFor(() => answers.inUse === 0, "the answers' shares given back");
});

test("a client holding answers too near its share for another large one is refused a list before the page is built: the 429 of a page it would not be sent, for a short page too", async () => {
  // 127.0.0.31 holds a share less a few bytes unread, as a client that stopped reading pages does: no answer of a piece or more fits beside them.
  const answers = running.runtime.answers;
  const held = answers.share - 10;
  answers.take("127.0.0.31", held, false);
  const headers = { authorization: `Bearer ${token}` };
  const reader = new Connection(port, "127.0.0.31");
  const refused = [];
  for (const path of [PAGE, "/public/v1/accounts?per_page=1", "/public/v1/webhook-deliveries"]) {
    const res = await reader.request("GET", path, headers);
    refused.push({ status: res.status, retryAfter: res.headers["retry-after"], problem: JSON.parse(res.body) });
  }
  // A short answer that is no list is sent as before.
  const one = await reader.request("GET", "/public/v1/event-types", headers);
  reader.destroy();
  answers.release("127.0.0.31", held);
  const expected = {
    status: 429,
    retryAfter: "1",
    problem: {
      type: "urn:crm:problem:answers-unread",
      title: "Too Many Requests",
      status: 429,
      detail: "This client has answers the server still holds, not yet read, too near its share of 2 MiB (an eighth of --answer-buffer-max-mb) for this answer. Read the answers already asked for, then retry after the Retry-After seconds.",
    },
  };
  expect({ refused, one: one.status }).toEqual({ refused: [expected, expected, expected], one: 200 });
  await waitFor(() => answers.inUse === 0, "the answers' shares given back");
});
