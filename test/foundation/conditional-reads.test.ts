import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Connection } from "../limits/support.ts";
import { listeningServer, validation } from "./support.ts";

// A sync job that polls a contact sends the ETag of its last read as If-None-Match: while the
// contact has not changed, the answer is 304 with no body (RFC 9110 section 13.1.2), over the wire.

let running: Awaited<ReturnType<typeof listeningServer>>;
let auth: Record<string, string>;
beforeAll(async () => {
  running = await listeningServer("conditional-reads");
  auth = { authorization: `Bearer ${running.token}` };
});
afterAll(async () => await running.stop());

/** call sends one request to the running server and reads its body as text. */
async function call(method: string, path: string, headers: Record<string, string> = {}, body?: unknown) {
  const res = await fetch(`${running.server.url}${path}`, {
    method,
    headers: { ...auth, ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** created posts a contact or an account and returns its path. */
async function created(collection: "contacts" | "accounts", body: unknown): Promise<string> {
  const res = await call("POST", `/public/v1/${collection}`, {}, body);
  return `/public/v1/${collection}/${(JSON.parse(res.text) as { data: { id: string } }).data.id}`;
}

/** answer is what a test compares of a response: its status, ETag, Cache-Control, Content-Type and body. */
const answer = (res: { status: number; headers: Headers; text: string }) => ({
  status: res.status,
  etag: res.headers.get("etag"),
  cacheControl: res.headers.get("cache-control"),
  contentType: res.headers.get("content-type"),
  body: res.text === "" ? "" : JSON.parse(res.text),
});

const notModified = (etag: string) => ({ status: 304, etag, cacheControl: "no-store", contentType: null, body: "" });

describe("conditional reads: If-None-Match", () => {
  test("a 304 on the wire is the 200's headers without the body: ETag, Cache-Control: no-store, the request id and the rate limit, no Content-Type and no Content-Length", async () => {
    const contact = await created("contacts", { first_name: "Ada" });
    const connection = new Connection(running.server.server.port!);
    try {
      const read = await connection.request("GET", contact, auth);
      const again = await connection.request("GET", contact, { ...auth, "if-none-match": read.headers.etag! });
      // The 200's headers whose values do not change from one answer to the next; the others must be there.
      const kept = ["etag", "cache-control", "ratelimit-policy"];
      const keptOf = (headers: Record<string, string>) => Object.fromEntries(kept.map((name) => [name, headers[name]]));
      const present = ["x-request-id", "date", "ratelimit"].filter((name) => again.headers[name] !== undefined);
      expect({ status: again.status, kept: keptOf(again.headers), present, body: again.body }).toEqual({
        status: 304,
        kept: keptOf(read.headers),
        present: ["x-request-id", "date", "ratelimit"],
        body: "",
      });
      expect([again.headers["content-type"], again.headers["content-length"], again.headers["transfer-encoding"]]).toEqual([undefined, undefined, undefined]);
      // Nothing followed the 304's head: the next answer on the connection is read whole from its start.
      const next = await connection.request("GET", contact, { ...auth, "if-none-match": '"2"' });
      expect([next.status, JSON.parse(next.body)]).toEqual([200, JSON.parse(read.body)]);
    } finally {
      connection.destroy();
    }
  });

  test("a contact's or account's GET and HEAD whose If-None-Match names its version (weakly compared, in a list) or is * answer 304; other tags, and any once it changed, answer 200 with the body", async () => {
    const contact = await created("contacts", { first_name: "Ada" });
    const account = await created("accounts", { name: "Acme" });
    const conditions = ['"1"', 'W/"1"', '"7", W/"1"', '"1",', "*"];
    const answers = [];
    for (const path of [contact, account]) {
      for (const condition of conditions) {
        answers.push(answer(await call("GET", path, { "if-none-match": condition })), answer(await call("HEAD", path, { "if-none-match": condition })));
      }
    }
    expect(answers).toEqual(Array(answers.length).fill(notModified('"1"')));

    const stored = JSON.parse((await call("GET", contact)).text);
    const other = answer(await call("GET", contact, { "if-none-match": '"2", W/"3"' }));
    const otherHead = answer(await call("HEAD", contact, { "if-none-match": '"2"' }));
    expect([other, otherHead]).toEqual([
      { status: 200, etag: '"1"', cacheControl: "no-store", contentType: "application/json;charset=utf-8", body: stored },
      { status: 200, etag: '"1"', cacheControl: "no-store", contentType: "application/json;charset=utf-8", body: "" },
    ]);

    const patched = JSON.parse((await call("PATCH", contact, {}, { last_name: "Lovelace" })).text);
    const renamed = JSON.parse((await call("PATCH", account, {}, { name: "Acme Corp" })).text);
    const changed = [answer(await call("GET", contact, { "if-none-match": '"1"' })), answer(await call("GET", account, { "if-none-match": 'W/"1"' }))];
    expect(changed).toEqual([
      { status: 200, etag: '"2"', cacheControl: "no-store", contentType: "application/json;charset=utf-8", body: patched },
      { status: 200, etag: '"2"', cacheControl: "no-store", contentType: "application/json;charset=utf-8", body: renamed },
    ]);
    expect(answer(await call("GET", contact, { "if-none-match": '"2"' }))).toEqual(notModified('"2"'));
  });

  test("a read that sends no ETag ignores If-None-Match (a contact with include, the lists, a user); an id that does not exist stays 404 whatever the header, however long; a header that is not entity tags is 422 naming it", async () => {
    const account = await created("accounts", { name: "Initech" });
    const contact = await created("contacts", { first_name: "Grace", account_ids: [account.split("/").pop()] });
    const user = await call("POST", "/public/v1/users", {}, { name: "Grace Hopper", email: "grace@example.com" });
    const userPath = `/public/v1/users/${JSON.parse(user.text).data.id}`;
    const ignored = [`${contact}?include=accounts`, "/public/v1/contacts?per_page=1", "/public/v1/accounts?per_page=1", userPath];
    const statuses = [];
    for (const path of ignored) statuses.push((await call("GET", path, { "if-none-match": "*" })).status);
    const embedded = await call("GET", `${contact}?include=accounts`, { "if-none-match": "*" });
    expect([statuses, embedded.headers.get("etag"), JSON.parse(embedded.text).data.accounts.length]).toEqual([[200, 200, 200, 200], null, 1]);

    const missing = await call("GET", "/public/v1/contacts/con_01J00000000000000000000000", { "if-none-match": "*" });
    const missingAccount = await call("GET", "/public/v1/accounts/acc_01J00000000000000000000000", { "if-none-match": "garbage" });
    expect([missing.status, missingAccount.status]).toEqual([404, 404]);
    // However long its list (the header limits bound it; ", " would count each tag as a field): ignored without an ETag, 404 without the id, read as tags with both.
    const longList = Array.from({ length: 300 }, (_, i) => `"${i + 100}"`).join(",");
    const longReads = [];
    for (const path of [`${contact}?include=accounts`, "/public/v1/contacts/con_01J00000000000000000000000", contact]) longReads.push((await call("GET", path, { "if-none-match": longList })).status);
    const current = await call("GET", contact, { "if-none-match": `${longList},"1"` });
    expect([longReads, current.status]).toEqual([[200, 404, 200], 304]);

    const malformed = [];
    for (const [path, value] of [[contact, "1"], [account, '"1", garbage'], [account, ","]] as const) {
      const res = await call("GET", path, { "if-none-match": value });
      malformed.push({ status: res.status, body: JSON.parse(res.text) });
    }
    const refused = { status: 422, body: validation([{ header: "if-none-match", detail: 'must be * or entity tags such as "3" (the ETag of a read), separated by commas' }]) };
    expect(malformed).toEqual([refused, refused, refused]);
  });
});
