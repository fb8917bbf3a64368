import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createApiToken } from "../../server/auth/service.ts";
import { createContact } from "../../server/contacts/service.ts";
import { bodyFingerprint, canonicalJson, IDEMPOTENCY_RETENTION_MS, pruneIdempotencyKeys } from "../../server/idempotency/service.ts";
import { sha256 } from "../../server/shared/crypto.ts";
import { gone } from "../support/deleted-before-upgrade.ts";
import { createHarness, UNKNOWN_ORIGIN, type Harness } from "../support/harness.ts";
import { Connection } from "../limits/support.ts";
import { contactCount, expectProblem, listeningServer } from "./support.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const accountCount = async () => (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM accounts"))!.n;
const storedKeys = async () => (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM idempotency_keys"))!.n;

// Both POST routes behave the same; each case runs against both.
const ROUTES = [
  { path: "/public/v1/contacts", body: { first_name: "Ada", email: "ada@example.com" }, other: { first_name: "Eve" }, invalid: { email: "nope" }, count: () => contactCount(h) },
  { path: "/public/v1/accounts", body: { name: "Acme", domain: "acme.test" }, other: { name: "Globex" }, invalid: { domain: "x.test" }, count: accountCount },
] as const;

for (const route of ROUTES) {
  describe(`idempotency on POST ${route.path}: happy paths`, () => {
    test("the same key and body replays status and body with Idempotent-Replayed: true", async () => {
      const headers = { "idempotency-key": "import-row-17" };
      const first = await h.json("POST", route.path, { body: route.body, headers });
      expect(first.status).toBe(201);
      expect(first.headers.get("idempotent-replayed")).toBeNull();
      const again = await h.json("POST", route.path, { body: route.body, headers });
      expect(again.status).toBe(201);
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(again.body).toEqual(first.body);
      // key order in the body does not matter: the fingerprint is over canonical JSON
      const reordered = Object.fromEntries(Object.entries(route.body).reverse());
      const third = await h.json("POST", route.path, { body: reordered, headers });
      expect(third.headers.get("idempotent-replayed")).toBe("true");
      expect(third.body).toEqual(first.body);
      expect(await route.count()).toBe(1);
    });

    test("a response kept by an older crm, without the fields added since, replays as it was kept", async () => {
      const headers = { "idempotency-key": "before-upgrade" };
      const first = await h.json("POST", route.path, { body: route.body, headers });
      // What an older crm kept: its answer had no version yet (migration 0010), a field the route's response schema now requires.
      const { version: _, ...older } = first.body.data;
      await h.rt.db.run("UPDATE idempotency_keys SET response_body = ? WHERE idem_key = 'before-upgrade'", [JSON.stringify({ data: older })]);
      const again = await h.json("POST", route.path, { body: route.body, headers });
      expect(again.status).toBe(201);
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(again.headers.get("content-type")).toBe(first.headers.get("content-type"));
      expect(again.headers.get("location")).toBe(first.headers.get("location"));
      expect(again.body).toEqual({ data: older });
    });

    test("without a key every POST creates", async () => {
      await h.json("POST", route.path, { body: route.body });
      await h.json("POST", route.path, { body: route.body });
      expect(await route.count()).toBe(2);
      expect(await storedKeys()).toBe(0);
    });

    test("20 concurrent POSTs with one key create exactly one record", async () => {
      const headers = { "idempotency-key": "burst" };
      const results = await Promise.all(Array.from({ length: 20 }, () => h.json("POST", route.path, { body: route.body, headers })));
      expect(await route.count()).toBe(1);
      const created = results.filter((r) => r.status === 201 && r.headers.get("idempotent-replayed") === null);
      expect(created.length).toBe(1);
      for (const r of results) {
        if (r.status === 201) expect(r.body).toEqual(created[0]!.body);
        else {
          expectProblem(r, 409, "idempotency-key-in-use");
          expect(r.headers.get("retry-after")).toBe("1");
        }
      }
      const replay = await h.json("POST", route.path, { body: route.body, headers });
      expect(replay.headers.get("idempotent-replayed")).toBe("true");
      expect(replay.body).toEqual(created[0]!.body);
    });

    test("keys are scoped per path: one key on two routes creates on each", async () => {
      const headers = { "idempotency-key": "shared-key" };
      const other = ROUTES.find((r) => r.path !== route.path)!;
      expect((await h.json("POST", route.path, { body: route.body, headers })).status).toBe(201);
      const res = await h.json("POST", other.path, { body: other.body, headers });
      expect(res.status).toBe(201);
      expect(res.headers.get("idempotent-replayed")).toBeNull();
    });

    test("a retry with a trailing slash on the path replays too", async () => {
      const headers = { "idempotency-key": "slash" };
      const first = await h.json("POST", route.path, { body: route.body, headers });
      const again = await h.json("POST", `${route.path}/`, { body: route.body, headers });
      expect(again.status).toBe(201);
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(again.body).toEqual(first.body);
      expect(await route.count()).toBe(1);
    });

    test("keys older than 24 hours are not replayed and are pruned", async () => {
      const headers = { "idempotency-key": "old-key" };
      const first = await h.json("POST", route.path, { body: route.body, headers });
      await h.rt.db.run("UPDATE idempotency_keys SET created_at = created_at - ?", [IDEMPOTENCY_RETENTION_MS + 1000]);
      const second = await h.json("POST", route.path, { body: route.body, headers });
      expect(second.status).toBe(201);
      expect(second.headers.get("idempotent-replayed")).toBeNull();
      expect(second.body.data.id).not.toBe(first.body.data.id);
      expect(await route.count()).toBe(2);
      // the fresh record replaced the expired one, so it replays now
      const third = await h.json("POST", route.path, { body: route.body, headers });
      expect(third.body).toEqual(second.body);

      await h.json("POST", route.path, { body: route.body, headers: { "idempotency-key": "to-expire" } });
      await h.rt.db.run("UPDATE idempotency_keys SET created_at = created_at - ? WHERE idem_key = 'to-expire'", [IDEMPOTENCY_RETENTION_MS + 1]);
      expect(await storedKeys()).toBe(2);
      expect(await pruneIdempotencyKeys(h.rt.db, Date.now(), h.rt.batchRows)).toBe(1);
      expect((await h.rt.db.all("SELECT idem_key FROM idempotency_keys"))).toEqual([{ idem_key: "old-key" }]);
      expect(await pruneIdempotencyKeys(h.rt.db, Date.now() + IDEMPOTENCY_RETENTION_MS + 1, h.rt.batchRows)).toBe(1);
      expect(await storedKeys()).toBe(0);
    });
  });

  describe(`idempotency on POST ${route.path}: errors`, () => {
    test("the same key with a different body is 422 and creates nothing", async () => {
      const headers = { "idempotency-key": "k1" };
      await h.json("POST", route.path, { body: route.body, headers });
      const res = await h.json("POST", route.path, { body: route.other, headers });
      expect(res.status).toBe(422);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(res.body).toEqual({
        type: "urn:crm:problem:idempotency-key-reused",
        title: "Unprocessable Content",
        status: 422,
        detail: "This Idempotency-Key was already used with a different request body. Use a new key for a different request.",
      });
      expect(await route.count()).toBe(1);
    });

    test("a request refused by validation is not stored: the fixed retry with that key succeeds", async () => {
      const headers = { "idempotency-key": "fix-me" };
      expectProblem(await h.json("POST", route.path, { body: route.invalid, headers }), 422, "validation");
      expect(await storedKeys()).toBe(0);
      const fixed = await h.json("POST", route.path, { body: route.body, headers });
      expect(fixed.status).toBe(201);
      expect(fixed.headers.get("idempotent-replayed")).toBeNull();
      expect(await route.count()).toBe(1);
    });

    test("a key over 255 characters or empty is 422 naming the header", async () => {
      for (const key of ["k".repeat(256), ""]) {
        const res = await h.json("POST", route.path, { body: route.body, headers: { "idempotency-key": key } });
        expect(res.body).toEqual({
          type: "urn:crm:problem:validation",
          title: "Unprocessable Content",
          status: 422,
          detail: "Idempotency-Key must be 1 to 255 characters.",
          errors: [{ header: "idempotency-key", detail: "must be 1 to 255 characters" }],
        });
      }
      expect(await route.count()).toBe(0);
      const ok = await h.json("POST", route.path, { body: route.body, headers: { "idempotency-key": "k".repeat(255) } });
      expect(ok.status).toBe(201);
    });
    test("a key sent more than once (Bun joins the fields with \", \"), or holding a comma or a character that is not printable ASCII, is 422 naming the header; spaces and punctuation are fine", async () => {
      const refused = (detail: string, field: string) => ({ type: "urn:crm:problem:validation", title: "Unprocessable Content", status: 422, detail, errors: [{ header: "idempotency-key", detail: field }] });
      const twice = refused("Idempotency-Key must be one key, sent once: a key holds no commas, and two keys (a list, or the header sent twice) would name neither.", "is given more than once (a key holds no commas)");
      const notAscii = refused("Idempotency-Key must be printable ASCII (letters, digits, spaces and punctuation) other than the comma.", "must be printable ASCII other than the comma");
      for (const [key, answer] of [["A, B", twice], ["A,B", twice], ["A, ", twice], [", B", twice], ["caf\u00e9", notAscii], ["a\tb", notAscii]] as const) {
        expect((await h.json("POST", route.path, { body: route.body, headers: { "idempotency-key": key } })).body).toEqual(answer);
      }
      expect([await route.count(), await storedKeys()]).toEqual([0, 0]);
      const first = await h.json("POST", route.path, { body: route.body, headers: { "idempotency-key": "order 42/#1!~" } });
      const again = await h.json("POST", route.path, { body: route.body, headers: { "idempotency-key": "order 42/#1!~" } });
      expect([first.status, again.status, again.headers.get("idempotent-replayed"), await route.count()]).toEqual([201, 201, "true", 1]);
    });
  });

  describe(`idempotency on POST ${route.path}: security`, () => {
    test("a second token using the same key does not get the first token's response", async () => {
      const { token: other } = await createApiToken(h.rt.db, "other-integration");
      const headers = { "idempotency-key": "same-key" };
      const mine = await h.json("POST", route.path, { body: route.body, headers });
      const theirs = await h.json("POST", route.path, { body: route.body, headers: { ...headers, authorization: `Bearer ${other}` } });
      expect(theirs.status).toBe(201);
      expect(theirs.headers.get("idempotent-replayed")).toBeNull();
      expect(theirs.body.data.id).not.toBe(mine.body.data.id);
      expect(await route.count()).toBe(2);
      // and their retry replays their own response
      const theirsAgain = await h.json("POST", route.path, { body: route.body, headers: { ...headers, authorization: `Bearer ${other}` } });
      expect(theirsAgain.body).toEqual(theirs.body);
    });

    test("a request without a valid token never reaches the idempotency store", async () => {
      const res = await h.json("POST", route.path, { body: route.body, headers: { "idempotency-key": "x", authorization: "Bearer crm_forged_token_value_0000000000000000" } });
      expectProblem(res, 401, "unauthorized");
      expect(await storedKeys()).toBe(0);
    });
  });
}

describe("idempotency: errors found inside the write", () => {
  test("a request refused inside the write (unknown account id) is not stored either", async () => {
    const headers = { "idempotency-key": "relations" };
    const res = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Rel", account_ids: ["acc_00000000000000000000000000"] }, headers });
    expectProblem(res, 422, "validation");
    expect(await storedKeys()).toBe(0);
    const fixed = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Rel", account_ids: [] }, headers });
    expect(fixed.status).toBe(201);
    expect(fixed.headers.get("idempotent-replayed")).toBeNull();
  });
});

describe("idempotency: the path's spelling", () => {
  test("an id spelled with percent-escapes (%5F, %5f for _) is the same path: the retry replays instead of acting again", async () => {
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data;
    const headers = { "idempotency-key": "tag-vip" };
    const first = await h.json("POST", `/public/v1/contacts/${contact.id}/tags`, { body: { tag: "vip" }, headers });
    expect(first.status).toBe(200);
    for (const escaped of [contact.id.replace("_", "%5F"), contact.id.replace("_", "%5f"), contact.id.replace("c", "%63")]) {
      const again = await h.json("POST", `/public/v1/contacts/${escaped}/tags`, { body: { tag: "vip" }, headers });
      expect([again.status, again.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
      expect(again.body).toEqual(first.body);
    }
    expect(await storedKeys()).toBe(1);
  });
});

describe("idempotency: the answers kept of a contact or account deleted since", () => {
  const keptAnswers = () => h.rt.db.all<{ idem_key: string; status: number; response_body: string }>("SELECT idem_key, status, response_body FROM idempotency_keys ORDER BY idem_key");

  test("a contact's create, tag and account link replay 410 replay-resource-deleted once it is deleted, the rows keep nothing of it, and the create is not made again", async () => {
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data;
    const body = { email: "Erase.Me@Example.com", first_name: "Ermintrude", phone: "+15550004242", custom_fields: { diagnosis: "secret-cf-value" } };
    const created = await h.json("POST", "/public/v1/contacts", { body, headers: { "idempotency-key": "create-1" } });
    const id = created.body.data.id as string;
    const tag = { path: `/public/v1/contacts/${id}/tags`, body: { tag: "t2" }, key: "tag-1" };
    const link = { path: `/public/v1/contacts/${id}/accounts`, body: { account_id: account.id }, key: "link-1" };
    for (const post of [tag, link]) expect((await h.json("POST", post.path, { body: post.body, headers: { "idempotency-key": post.key } })).status).toBe(200);
    const other = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Kept" }, headers: { "idempotency-key": "other-1" } });
    expect((await h.request("DELETE", `/public/v1/contacts/${id}`)).status).toBe(204);

    for (const post of [{ path: "/public/v1/contacts", body, key: "create-1" }, tag, link]) {
      const replay = await h.json("POST", post.path, { body: post.body, headers: { "idempotency-key": post.key } });
      expect([replay.status, replay.headers.get("content-type"), replay.headers.get("idempotent-replayed"), replay.headers.get("location"), replay.headers.get("etag")]).toEqual([410, "application/problem+json", null, null, null]);
      expect(replay.body).toEqual(gone("contact", id));
    }
    // Another body under the key is still another request.
    expectProblem(await h.json("POST", "/public/v1/contacts", { body: { first_name: "Else" }, headers: { "idempotency-key": "create-1" } }), 422, "idempotency-key-reused");
    expect(await contactCount(h)).toBe(1);
    const otherReplay = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Kept" }, headers: { "idempotency-key": "other-1" } });
    expect([otherReplay.status, otherReplay.body]).toEqual([201, other.body]);

    const withdrawn = JSON.stringify({ resource: "contact", id });
    expect(await keptAnswers()).toEqual([
      { idem_key: "create-1", status: 410, response_body: withdrawn },
      { idem_key: "link-1", status: 410, response_body: withdrawn },
      { idem_key: "other-1", status: 201, response_body: JSON.stringify(other.body) },
      { idem_key: "tag-1", status: 410, response_body: withdrawn },
    ]);
  });

  test("an account's create replays 410 replay-resource-deleted once it is deleted, and its row keeps nothing of it", async () => {
    const body = { name: "Secret Clinic", domain: "secret-clinic.example" };
    const created = await h.json("POST", "/public/v1/accounts", { body, headers: { "idempotency-key": "acc-1" } });
    const id = created.body.data.id as string;
    expect((await h.request("DELETE", `/public/v1/accounts/${id}`)).status).toBe(204);
    const replay = await h.json("POST", "/public/v1/accounts", { body, headers: { "idempotency-key": "acc-1" } });
    expect([replay.status, replay.headers.get("idempotent-replayed"), replay.body]).toEqual([410, null, gone("account", id)]);
    expect(await accountCount()).toBe(0);
    expect(await keptAnswers()).toEqual([{ idem_key: "acc-1", status: 410, response_body: JSON.stringify({ resource: "account", id }) }]);
  });
});

describe("idempotency: a key used again after its 24 hours", () => {
  test("makes its request, though the contact its expired answer showed is deleted while the request runs", async () => {
    const old = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Old" }, headers: { "idempotency-key": "reused-1" } })).body.data;
    await h.rt.db.run("UPDATE idempotency_keys SET created_at = created_at - ?", [IDEMPOTENCY_RETENTION_MS + 1000]);
    const { id: tokenId } = (await h.rt.db.get<{ id: string }>("SELECT id FROM api_tokens"))!;
    const body = { first_name: "Brand", email: "new@example.com" };
    // The route's own work, with the old contact's delete landing after the key was taken for the
    // new request (reserved in the database on PostgreSQL) and before its answer is kept.
    const made = await h.rt.idempotency.run({ tokenId, method: "POST", path: "/public/v1/contacts", key: "reused-1", fingerprint: () => bodyFingerprint(body) }, async (scope) => {
      expect((await h.request("DELETE", `/public/v1/contacts/${old.id}`)).status).toBe(204);
      return createContact(h.rt, body, scope, UNKNOWN_ORIGIN);
    });
    const created = JSON.parse(JSON.stringify(made.body));
    expect([made.status, made.replayed, created.data.email]).toEqual([201, false, "new@example.com"]);
    const retry = await h.json("POST", "/public/v1/contacts", { body, headers: { "idempotency-key": "reused-1" } });
    expect([retry.status, retry.headers.get("idempotent-replayed"), retry.body]).toEqual([201, "true", created]);
    expect((await h.json("GET", `/public/v1/contacts/${created.data.id}`)).body).toEqual(created);
    expect(await h.rt.db.all("SELECT idem_key, status, resource_id FROM idempotency_keys")).toEqual([{ idem_key: "reused-1", status: 201, resource_id: created.data.id }]);
  });
});

describe("idempotency: names and tags sent decomposed (NFD), which the routes store in NFC", () => {
  const nfd = (text: string) => text.normalize("NFD");
  const tokenId = async () => (await h.rt.db.get<{ id: string }>("SELECT id FROM api_tokens"))!.id;

  test("an answer a crm before that kept, fingerprinted from the body as sent, replays the same bytes retried after the upgrade", async () => {
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "José", email: "jose@example.com" } })).body.data;
    const tagged = (await h.json("POST", `/public/v1/contacts/${contact.id}/tags`, { body: { tag: "café" } })).body;
    const batchAnswer = { data: [{ status: "created", id: "con_01M8KC3D433VZ3M2PATPTD8YAN" }] };
    const kept = [
      { path: "/public/v1/contacts", key: "k-nfd", body: { email: "jose@example.com", first_name: nfd("José") }, status: 201, answer: { data: contact } },
      { path: "/public/v1/contacts/batch", key: "k-batch", body: { items: [{ email: "b1@example.com", first_name: nfd("José"), tags: [nfd("café")] }] }, status: 200, answer: batchAnswer },
      { path: `/public/v1/contacts/${contact.id}/tags`, key: "k-tag", body: { tag: nfd("café") }, status: 200, answer: tagged },
    ];
    // As 1d6be56 kept them: SHA-256 of the canonical JSON of the body the client sent.
    for (const k of kept) {
      await h.rt.db.run("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, 'POST', ?, ?, ?, ?, ?, ?)", [
        await tokenId(), k.path, k.key, sha256(canonicalJson(k.body)), k.status, JSON.stringify(k.answer), Date.now(),
      ]);
    }
    for (const k of kept) {
      const retry = await h.json("POST", k.path, { body: k.body, headers: { "idempotency-key": k.key } });
      expect([k.key, retry.status, retry.headers.get("idempotent-replayed"), retry.body]).toEqual([k.key, k.status, "true", k.answer]);
    }
    expect(await contactCount(h)).toBe(1);
  });

  test("a body sent twice decomposed replays, and the same text composed under its key is another request", async () => {
    const sent = [
      { path: "/public/v1/contacts", body: { email: "nfd@example.com", first_name: nfd("José"), tags: [nfd("café")] }, composed: { email: "nfd@example.com", first_name: "José", tags: ["café"] } },
      { path: "/public/v1/contacts/batch", body: { items: [{ email: "b1@example.com", last_name: nfd("Müller") }] }, composed: { items: [{ email: "b1@example.com", last_name: "Müller" }] } },
    ];
    for (const s of sent) {
      const headers = { "idempotency-key": `twice ${s.path}` };
      const first = await h.json("POST", s.path, { body: s.body, headers });
      const again = await h.json("POST", s.path, { body: s.body, headers });
      expect([again.status, again.headers.get("idempotent-replayed"), again.body]).toEqual([first.status, "true", first.body]);
      expectProblem(await h.json("POST", s.path, { body: s.composed, headers }), 422, "idempotency-key-reused");
    }
    expect(await contactCount(h)).toBe(2);
  });
});

describe("idempotency: Idempotency-Key on two header lines, over the wire", () => {
  test("is refused 422 and creates nothing, so a retry with either key alone creates once", async () => {
    const running = await listeningServer("idempotency-twice");
    const connection = new Connection(running.server.server.port!);
    try {
      const body = JSON.stringify({ first_name: "Ada" });
      const send = (keys: string[]) => {
        connection.write(
          `POST /public/v1/contacts HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${running.token}\r\ncontent-type: application/json\r\n${keys.map((key) => `idempotency-key: ${key}\r\n`).join("")}content-length: ${body.length}\r\n\r\n${body}`,
        );
        return connection.response();
      };
      const twice = await send(["A", "B"]);
      expect([twice.status, JSON.parse(twice.body).errors]).toEqual([422, [{ header: "idempotency-key", detail: "is given more than once (a key holds no commas)" }]]);
      const first = await send(["A"]);
      const retry = await send(["A"]);
      expect([first.status, retry.status, retry.headers["idempotent-replayed"], JSON.parse(retry.body)]).toEqual([201, 201, "true", JSON.parse(first.body)]);
    } finally {
      connection.destroy();
      await running.stop();
    }
  });
});
