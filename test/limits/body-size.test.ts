import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApiToken } from "../../server/auth/service.ts";
import { MAX_BODY_BYTES, MAX_FORM_BYTES } from "../../server/limits/limits.ts";
import { listeningServer } from "../foundation/support.ts";
import { Connection, type RawResponse } from "./support.ts";

// The 1 MiB body limit is the service's own answer whatever the size, the framing or the address:
// problem+json on the API, the page explaining it on the console. Only a real server shows it, as
// Bun answers past its own cap (maxRequestBodySize) before the app sees the request.

let running: Awaited<ReturnType<typeof listeningServer>>;
let port: number;
beforeAll(async () => {
  running = await listeningServer("body-size");
  port = Number(new URL(running.server.url).port);
});
afterAll(() => running.stop());

const TOO_LARGE = { type: "urn:crm:problem:body-too-large", title: "Content Too Large", status: 413, detail: `The request body exceeds the limit of ${MAX_BODY_BYTES} bytes (1 MiB).` };
const TOO_LARGE_PAGE = {
  status: 413,
  type: "text/html; charset=utf-8",
  title: "Form too large · CRM console",
  main: `<section class="card message"><h1>Form too large</h1><p>The request body exceeds the limit of ${MAX_FORM_BYTES} bytes (64 KiB).</p><p><a class="button" href="/console/">Back to the console</a></p></section>`,
};

/** answerOf reduces an answer to what the tests compare whole: problem+json parsed, a console page by its title and <main>. */
function answerOf(res: RawResponse) {
  const type = res.headers["content-type"];
  const body = Buffer.from(res.body, "latin1").toString("utf8");
  if (type !== "text/html; charset=utf-8") return { status: res.status, type, body: body === "" ? "" : JSON.parse(body) };
  return { status: res.status, type, title: /<title>([^<]*)<\/title>/.exec(body)?.[1], main: /<main[^>]*>([\s\S]*)<\/main>/.exec(body)?.[1] };
}

/** bodyOf is the body a send gives: `body` itself, or that many bytes of "a". */
const bodyOf = (body: number | Buffer) => (typeof body === "number" ? Buffer.alloc(body, "a") : body);

/** sendDeclared sends a body (bodyOf) with its Content-Length on a new connection and returns the answer. */
async function sendDeclared(path: string, headers: Record<string, string>, body: number | Buffer): Promise<RawResponse> {
  const bytes = bodyOf(body);
  const c = new Connection(port);
  const head = Object.entries({ host: "127.0.0.1", ...headers, "content-length": String(bytes.length) }).map(([k, v]) => `${k}: ${v}\r\n`);
  c.write(`POST ${path} HTTP/1.1\r\n${head.join("")}\r\n`);
  c.writeBytes(bytes);
  const answer = await c.response();
  c.destroy();
  return answer;
}

/** sendChunked sends a body (bodyOf) in 64 KiB chunks without a declared length, on a new connection, and returns the answer. */
async function sendChunked(path: string, headers: Record<string, string>, body: number | Buffer): Promise<RawResponse> {
  const bytes = bodyOf(body);
  const c = new Connection(port);
  const head = Object.entries({ host: "127.0.0.1", ...headers, "transfer-encoding": "chunked" }).map(([k, v]) => `${k}: ${v}\r\n`);
  c.write(`POST ${path} HTTP/1.1\r\n${head.join("")}\r\n`);
  for (let sent = 0; sent < bytes.length; sent += 64 * 1024) {
    const chunk = bytes.subarray(sent, sent + 64 * 1024);
    c.write(`${chunk.length.toString(16)}\r\n`);
    c.writeBytes(chunk);
    c.write("\r\n");
  }
  c.write("0\r\n\r\n");
  const answer = await c.response();
  c.destroy();
  return answer;
}

describe("request bodies past 1 MiB, through a real server", () => {
  test("a body declared past 2 MiB gets the API's 413 problem+json, and the console's 413 page, never Bun's bare 413", async () => {
    const token = (await createApiToken(running.server.runtime.db, "big-bodies")).token;
    const api = await sendDeclared("/public/v1/contacts", { authorization: `Bearer ${token}`, "content-type": "application/json" }, 3_000_000);
    const console = await sendDeclared("/console/login", { "content-type": "application/x-www-form-urlencoded" }, 3_000_000);
    expect([answerOf(api), answerOf(console)]).toEqual([{ status: 413, type: "application/problem+json", body: TOO_LARGE }, TOO_LARGE_PAGE]);
    expect(await running.server.runtime.db.get("SELECT count(*) AS n FROM contacts")).toEqual({ n: 0 });
  });

  test("a body of exactly 1 MiB is within the limit: a contact padded to MAX_BODY_BYTES with spaces is created, declared or chunked (s37 mutation audit)", async () => {
    const token = (await createApiToken(running.server.runtime.db, "bodies-at-the-limit")).token;
    const atTheLimit = (first_name: string) => Buffer.from(JSON.stringify({ first_name }).padEnd(MAX_BODY_BYTES, " "));
    const json = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const answers = [await sendDeclared("/public/v1/contacts", json, atTheLimit("Declared")), await sendChunked("/public/v1/contacts", json, atTheLimit("Chunked"))];
    expect(answers.map((res) => [res.status, answerOf(res).body.data?.first_name])).toEqual([
      [201, "Declared"],
      [201, "Chunked"],
    ]);
  });

  test("a console form past 64 KiB gets the 413 page, declared or chunked, before its fields are looked at", async () => {
    const form = { "content-type": "application/x-www-form-urlencoded" };
    const answers = [await sendDeclared("/console/login", form, MAX_FORM_BYTES + 1), await sendChunked("/console/login", form, 128 * 1024)];
    expect(answers.map(answerOf)).toEqual([TOO_LARGE_PAGE, TOO_LARGE_PAGE]);
  });

  test("a chunked body past 2 MiB gets the 413 page on the console whatever its type, and problem+json on the API", async () => {
    const token = (await createApiToken(running.server.runtime.db, "chunked-bodies")).token;
    const answers = [];
    for (const type of ["application/x-www-form-urlencoded", "application/json", "text/plain", "multipart/form-data; boundary=b"]) {
      answers.push(answerOf(await sendChunked("/console/login", { "content-type": type }, 3_000_000)));
    }
    answers.push(answerOf(await sendChunked("/public/v1/contacts", { authorization: `Bearer ${token}`, "content-type": "application/json" }, 3_000_000)));
    expect(answers).toEqual([TOO_LARGE_PAGE, TOO_LARGE_PAGE, TOO_LARGE_PAGE, TOO_LARGE_PAGE, { status: 413, type: "application/problem+json", body: TOO_LARGE }]);
  });
});
