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
        detail: `This client has answers the server still holds, not yet read, and this one (${mib(pageBytes)}) would take it past its share of 2 MiB (an eighth of --answer-buffer-max-mb). Read the answers already asked for, then retry after the Retry-After seconds.`,
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
