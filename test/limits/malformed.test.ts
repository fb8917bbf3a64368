import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { BUN_PARSER_ANSWERS } from "../../server/limits/limits.ts";
import { startServer, type RunningServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { closedWithin, Connection } from "./support.ts";

let running: RunningServer | undefined;
afterEach(async () => {
  await running?.stop();
  if (running) rmSync(running.runtime.config.dataDir, { recursive: true, force: true });
  running = undefined;
});

async function serve(): Promise<number> {
  running = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir: mkdtempSync(join(tmpdir(), "crm-malformed-")), logLevel: "error" }, createLogger("error", () => {}));
  return running.server.port!;
}

/** answerTo sends raw bytes on a new connection and describes the answer the way the README's table does. */
async function answerTo(port: number, bytes: string): Promise<string> {
  const c = new Connection(port);
  c.write(bytes);
  if (!(await closedWithin(c, 5000))) {
    c.destroy();
    return `still open; received ${JSON.stringify(c.received)}`;
  }
  const received = c.received;
  if (received === "") return "connection closed without an answer";
  const head = received.slice(0, received.indexOf("\r\n\r\n"));
  const body = received.slice(received.indexOf("\r\n\r\n") + 4);
  return `${head.split(" ")[1]}${body === "" ? ", no body" : ` with a body: ${body}`}, connection closed`;
}

/** EXAMPLES holds, for each row of BUN_PARSER_ANSWERS, requests of that kind. */
const EXAMPLES: Record<string, string[]> = {
  "a raw space or control character in the request target (`GET /a b HTTP/1.1`)": ["GET /health z HTTP/1.1\r\nhost: x\r\n\r\n", "GET /health\x01z HTTP/1.1\r\nhost: x\r\n\r\n"],
  "a protocol version other than `HTTP/1.0` and `HTTP/1.1`, or none (HTTP/0.9)": ["GET /healthz HTTP/2.0\r\nhost: x\r\n\r\n", "GET /healthz\r\n\r\n"],
  "lines ended by a bare LF instead of CRLF": ["GET /healthz HTTP/1.1\nhost: x\n\n"],
  "both `Content-Length` and `Transfer-Encoding`": ["POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"],
  "`Content-Length` repeated with another value, given as a list (`5, 5`), not a number, or 2^59 (576460752303423488) or more": [
    "POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello",
    "POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\ncontent-length: 5, 5\r\n\r\nhello",
    "POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n",
    "POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\ncontent-length: 576460752303423488\r\n\r\n",
  ],
  "a `Transfer-Encoding` other than `chunked`": ["POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n\r\n"],
  "a request target that is neither a path starting with `/` nor an absolute URL (`OPTIONS *`, `GET host:443`, `GET healthz`, `GET ?a=1`)": [
    "OPTIONS * HTTP/1.1\r\nhost: x\r\n\r\n",
    "GET 127.0.0.1:443 HTTP/1.1\r\nhost: x\r\n\r\n",
    "GET healthz HTTP/1.1\r\nhost: x\r\n\r\n",
    "GET ?a=1 HTTP/1.1\r\nhost: x\r\n\r\n",
  ],
  "`HTTP/1.1` without `Host`": ["GET /healthz HTTP/1.1\r\n\r\n"],
  "a header line without a colon, with a space in its name, folded onto a second line, or with a NUL byte": [
    "GET /healthz HTTP/1.1\r\nhost: x\r\nnocolon\r\n\r\n",
    "GET /healthz HTTP/1.1\r\nhost: x\r\nbad name: 1\r\n\r\n",
    "GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n  folded\r\n\r\n",
    "GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: a\0b\r\n\r\n",
  ],
  "bytes that are not HTTP at all (a TLS handshake on the plain-HTTP port)": ["\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n"],
  "a method in lowercase, or one Bun does not know (`get`, `FOO`)": ["get /healthz HTTP/1.1\r\nhost: x\r\n\r\n", "FOO /healthz HTTP/1.1\r\nhost: x\r\n\r\n"],
};

describe("malformed requests: answered by the service", () => {
  test("a repeated, empty, invalid or (in HTTP/1.0) missing Host, or a port past 65535, gets 400 problem+json naming the header", async () => {
    const port = await serve();
    const answers = [];
    const requests = ["host: a\r\nhost: b", "host: ", "host: a b", "host: a/b?c", "host: user@a", "host: a:65536", "host: a:99999"].map((host) => `GET /public/v1/contacts HTTP/1.1\r\n${host}\r\n\r\n`);
    // HTTP/1.0 allows leaving Host out, but Bun then passes the bare path on as the URL.
    requests.push("GET /public/v1/contacts?per_page=1 HTTP/1.0\r\nauthorization: Bearer crm_anything\r\n\r\n");
    for (const request of requests) {
      const c = new Connection(port);
      c.write(request);
      const answer = await c.response();
      c.destroy();
      answers.push([answer.status, answer.headers["content-type"], answer.headers["cache-control"], JSON.parse(answer.body).type, JSON.parse(answer.body).errors[0].header]);
    }
    // Bun passes a bare path on as the URL for some of them: it is still read as /public/v1's (no-store).
    expect(answers).toEqual(Array(8).fill([400, "application/problem+json", "no-store", "urn:crm:problem:invalid-host", "host"]));
    for (const request of ["GET /healthz HTTP/1.1\r\nhost: crm.example.com:8443\r\n\r\n", "GET /healthz HTTP/1.0\r\nhost: crm.example.com:65535\r\n\r\n"]) {
      const ok = new Connection(port);
      ok.write(request);
      expect((await ok.response()).status).toBe(200);
      ok.destroy();
    }
  });
});

describe("malformed requests: not malformed", () => {
  test("a Content-Length repeated with the same value is one length (RFC 9112 lets a recipient read it so): the request is answered as usual", async () => {
    const port = await serve();
    const c = new Connection(port);
    c.write("POST /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}");
    const answer = await c.response();
    c.destroy();
    expect({ status: answer.status, allow: answer.headers.allow, type: JSON.parse(answer.body).type }).toEqual({ status: 405, allow: "GET, HEAD", type: "urn:crm:problem:method-not-allowed" });
  });
});

describe("malformed requests: answered by Bun before the service", () => {
  test("each kind in the README's list gets the answer written there", async () => {
    const port = await serve();
    expect(BUN_PARSER_ANSWERS.map((row) => row.request).sort()).toEqual(Object.keys(EXAMPLES).sort());
    const seen: Record<string, string[]> = {};
    for (const row of BUN_PARSER_ANSWERS) seen[row.request] = await Promise.all(EXAMPLES[row.request]!.map((bytes) => answerTo(port, bytes)));
    expect(seen).toEqual(Object.fromEntries(BUN_PARSER_ANSWERS.map((row) => [row.request, EXAMPLES[row.request]!.map(() => row.answer)])));
  });

  test("the README's Limits section lists them", () => {
    const readme = readFileSync(join(import.meta.dir, "..", "..", "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("## Limits"), readme.indexOf("\n## ", readme.indexOf("## Limits") + 1));
    expect(BUN_PARSER_ANSWERS.map((row) => `| ${row.request} | ${row.answer} |`).filter((line) => !section.includes(`${line}\n`))).toEqual([]);
  });
});

describe("malformed requests: decoded by Bun before the service", () => {
  test("a raw byte that is not UTF-8 in the request target reaches the service as U+FFFD, as the README says, while the same byte percent-encoded is refused", async () => {
    const port = await serve();
    const { token } = await createApiToken(running!.runtime.db, "raw-bytes");
    const get = async (target: Uint8Array) => {
      const c = new Connection(port);
      c.writeBytes(Buffer.concat([Buffer.from("GET "), target, Buffer.from(` HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\n\r\n`)]));
      const answer = await c.response();
      c.destroy();
      return { status: answer.status, body: JSON.parse(Buffer.from(answer.body, "latin1").toString("utf8")) };
    };
    const raw = await get(Buffer.from("/public/v1/contacts/con_\xe9", "latin1"));
    const encoded = await get(Buffer.from("/public/v1/contacts/con_%E9"));
    expect([raw.status, raw.body.detail, encoded.status, encoded.body.type]).toEqual([404, 'No contact with id "con_\ufffd" exists.', 400, "urn:crm:problem:invalid-request-target"]);
  });
});

describe("malformed requests: answered by Bun after the service carried them out", () => {
  /** post is a POST of one contact under an Idempotency-Key, as raw bytes; `framing` is its body's. */
  const post = (token: string, key: string, email: string, framing: "length" | "chunked with a trailer") => {
    const body = JSON.stringify({ email });
    const head = `POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\nidempotency-key: ${key}\r\n`;
    if (framing === "length") return `${head}content-length: ${body.length}\r\n\r\n${body}`;
    return `${head}transfer-encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\nx-checksum: 1\r\n\r\n`;
  };

  test("a request pipelined behind a POST, and a chunked body with a trailer field: the POST is carried out, Bun answers nothing or a bare 400, and the POST sent again under its key replays its answer", async () => {
    const port = await serve();
    const { token } = await createApiToken(running!.runtime.db, "bun-after");
    const pipelined = await answerTo(port, `${post(token, "pipelined-1", "pipe@example.com", "length")}GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n`);
    const trailer = await answerTo(port, post(token, "trailer-1", "trailer@example.com", "chunked with a trailer"));
    expect([pipelined, trailer]).toEqual(["connection closed without an answer", "400, no body, connection closed"]);
    const stored = await running!.runtime.db.all<{ email: string }>("SELECT email FROM contacts ORDER BY email");
    expect(stored).toEqual([{ email: "pipe@example.com" }, { email: "trailer@example.com" }]);
    for (const [key, email] of [["pipelined-1", "pipe@example.com"], ["trailer-1", "trailer@example.com"]] as const) {
      const c = new Connection(port);
      c.write(post(token, key, email, "length"));
      const again = await c.response();
      c.destroy();
      expect([again.status, again.headers["idempotent-replayed"], JSON.parse(again.body).data.email]).toEqual([201, "true", email]);
    }
    expect(await running!.runtime.db.get("SELECT count(*) AS n FROM contacts")).toEqual({ n: 2 });
  });
});
