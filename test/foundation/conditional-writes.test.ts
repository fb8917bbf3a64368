import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createHarness, type Harness } from "../support/harness.ts";
import { eventTypes, validation } from "./support.ts";

// A sync job reads a contact, changes it, and writes it back: If-Match with the ETag of its read
// makes that write fail instead of overwriting a change someone made in between.

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

function stale(kind: string, id: string, version: number, asked: string) {
  return {
    type: "urn:crm:problem:precondition-failed",
    title: "Precondition Failed",
    status: 412,
    detail: `The ${kind} ${id} is at version ${version}, not ${asked}: it changed since you read it. Read it again, apply your change to what it is now, and send that.`,
    current_version: version,
  };
}

describe("conditional writes: happy paths", () => {
  test("a read's ETag is the version; PATCH with it as If-Match changes the contact and answers the next ETag", async () => {
    const id = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    const read = await h.json("GET", `/public/v1/contacts/${id}`);
    const embedded = await h.json("GET", `/public/v1/contacts/${id}?include=accounts`);
    expect([read.headers.get("etag"), embedded.status, embedded.headers.get("etag")]).toEqual(['"1"', 200, null]);
    const patched = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { last_name: "Lovelace" }, headers: { "if-match": read.headers.get("etag")! } });
    expect([patched.status, patched.headers.get("etag"), patched.body.data.version, patched.body.data.last_name]).toEqual([200, '"2"', 2, "Lovelace"]);
    const anyVersion = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Augusta" }, headers: { "if-match": "*" } });
    const listed = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Ada" }, headers: { "if-match": 'W/"3", "9", "3"' } });
    expect([anyVersion.status, anyVersion.body.data.version, listed.status, listed.body.data.version]).toEqual([200, 3, 200, 4]);
    const deleted = await h.request("DELETE", `/public/v1/contacts/${id}`, { headers: { "if-match": '"4"' } });
    expect(deleted.status).toBe(204);
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).status).toBe(404);
  });

  test("accounts take If-Match the same way", async () => {
    const id = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data.id;
    const read = await h.json("GET", `/public/v1/accounts/${id}`);
    const patched = await h.json("PATCH", `/public/v1/accounts/${id}`, { body: { domain: "acme.example" }, headers: { "if-match": read.headers.get("etag")! } });
    expect([read.headers.get("etag"), patched.status, patched.headers.get("etag")]).toEqual(['"1"', 200, '"2"']);
    expect((await h.request("DELETE", `/public/v1/accounts/${id}`, { headers: { "if-match": '"2"' } })).status).toBe(204);
  });

  test("without If-Match a write is unconditional, as before", async () => {
    const id = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Eve" } });
    const patched = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Ada" } });
    expect([patched.status, patched.body.data.version]).toEqual([200, 3]);
  });
});

describe("conditional writes: refused", () => {
  test("a PATCH or DELETE with an older version is 412 with the current ETag, and changes nothing and sends no event", async () => {
    const id = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Eve" } });
    const patch = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Mallory" }, headers: { "if-match": '"1"' } });
    expect({ status: patch.status, etag: patch.headers.get("etag"), body: patch.body }).toEqual({ status: 412, etag: '"2"', body: stale("contact", id, 2, "1") });
    const weak = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Mallory" }, headers: { "if-match": 'W/"2"' } });
    expect(weak.body).toEqual(stale("contact", id, 2, "a version If-Match names"));
    // Entity tags compare character by character (RFC 9110 8.8.3.2): "02" is not "2" (s37 mutation audit).
    const padded = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Mallory" }, headers: { "if-match": '"02"' } });
    expect([padded.status, padded.body]).toEqual([412, stale("contact", id, 2, "a version If-Match names")]);
    const removal = await h.json("DELETE", `/public/v1/contacts/${id}`, { headers: { "if-match": '"1", "3"' } });
    expect(removal.body).toEqual(stale("contact", id, 2, "1 or 3"));
    const stored = await h.json("GET", `/public/v1/contacts/${id}`);
    expect([stored.body.data.first_name, stored.body.data.version]).toEqual(["Eve", 2]);
    expect(await eventTypes(h)).toEqual(["contact.created", "contact.updated"]);
  });

  test("an account at another version is 412 too; its contacts keep their link", async () => {
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data.id;
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", account_ids: [account] } })).body.data.id;
    await h.json("PATCH", `/public/v1/accounts/${account}`, { body: { name: "Acme Corp" } });
    const patch = await h.json("PATCH", `/public/v1/accounts/${account}`, { body: { name: "Evil" }, headers: { "if-match": '"1"' } });
    const removal = await h.json("DELETE", `/public/v1/accounts/${account}`, { headers: { "if-match": '"1"' } });
    expect([patch.body, removal.body]).toEqual([stale("account", account, 2, "1"), stale("account", account, 2, "1")]);
    expect((await h.json("GET", `/public/v1/contacts/${contact}`)).body.data.account_ids).toEqual([account]);
    expect((await h.json("GET", `/public/v1/accounts/${account}`)).body.data.name).toBe("Acme Corp");
  });

  test("of two writes sent with the same If-Match at once, one changes the contact and the other is 412", async () => {
    const id = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    const writes = await Promise.all(["Eve", "Mallory"].map((name) => h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: name }, headers: { "if-match": '"1"' } })));
    expect(writes.map((w) => w.status).sort()).toEqual([200, 412]);
    const winner = writes.find((w) => w.status === 200)!.body.data.first_name;
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).body.data).toMatchObject({ first_name: winner, version: 2 });
  });

  test("a stale If-Match is 412 before the body's own faults, and a valid If-Match lets those be 422, for contacts and accounts alike", async () => {
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data.id;
    const readOnly = { full_name: "Eve", created_at: "2026-01-01T00:00:00Z" };
    const contactStale = await h.json("PATCH", `/public/v1/contacts/${contact}`, { body: { full_name: "Eve" }, headers: { "if-match": '"7"' } });
    const accountStale = await h.json("PATCH", `/public/v1/accounts/${account}`, { body: readOnly, headers: { "if-match": '"7"' } });
    expect([contactStale.body, accountStale.body]).toEqual([stale("contact", contact, 1, "7"), stale("account", account, 1, "7")]);
    const contactInvalid = await h.json("PATCH", `/public/v1/contacts/${contact}`, { body: { full_name: "Eve" }, headers: { "if-match": '"1"' } });
    const accountInvalid = await h.json("PATCH", `/public/v1/accounts/${account}`, { body: { created_at: "2026-01-01T00:00:00Z" }, headers: { "if-match": '"1"' } });
    expect([contactInvalid.status, contactInvalid.body.errors, accountInvalid.status, accountInvalid.body.errors]).toEqual([
      422,
      [{ pointer: "/full_name", detail: "is derived from first_name and last_name; set those instead" }],
      422,
      [{ pointer: "/created_at", detail: "is read-only" }],
    ]);
    expect(await eventTypes(h)).toEqual(["contact.created", "account.created"]);
  });

  test("empty elements of an If-Match list are ignored, as RFC 9110 (section 5.6.1.2) asks: the tags around them are compared", async () => {
    const id = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    const answers = [];
    for (const [value, first_name] of [['"1",', "Eve"], [', "2"', "Ada"], ['"9", , "3"', "Eve"], [' , "7",', "Ada"]] as const) {
      const res = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name }, headers: { "if-match": value } });
      answers.push({ value, status: res.status, version: res.body.data?.version ?? res.body.current_version });
    }
    expect(answers).toEqual([
      { value: '"1",', status: 200, version: 2 },
      { value: ', "2"', status: 200, version: 3 },
      { value: '"9", , "3"', status: 200, version: 4 },
      { value: ' , "7",', status: 412, version: 4 },
    ]);
  });

  test("If-Match on a contact that does not exist is 404, as without it", async () => {
    const res = await h.json("PATCH", "/public/v1/contacts/con_01J00000000000000000000000", { body: { first_name: "Eve" }, headers: { "if-match": "*" } });
    expect(res.status).toBe(404);
  });

  test("an If-Match that is not entity tags is 422 naming the header, and changes nothing", async () => {
    const id = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    for (const value of ["1", '"1', "v1, *", "", ",", " , ,"]) {
      const res = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Eve" }, headers: { "if-match": value } });
      expect({ value, status: res.status, body: res.body }).toEqual({
        value,
        status: 422,
        body: validation([{ header: "if-match", detail: 'must be * or entity tags such as "3" (the ETag of a read), separated by commas' }]),
      });
    }
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).body.data.version).toBe(1);
  });
});

describe("conditional writes: tags and account links", () => {
  test("adding or removing a tag or an account link takes If-Match like a PATCH: a stale one is 412 and changes nothing; each answer carries the contact's ETag, a replay too", async () => {
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } });
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data.id;
    const id = created.body.data.id;
    const contact = `/public/v1/contacts/${id}`;
    const staleAdd = await h.json("POST", `${contact}/tags`, { body: { tag: "vip" }, headers: { "if-match": '"7"' } });
    const staleLink = await h.json("POST", `${contact}/accounts`, { body: { account_id: account }, headers: { "if-match": '"7"' } });
    expect([created.headers.get("etag"), staleAdd.status, staleAdd.headers.get("etag"), staleAdd.body, staleLink.body]).toEqual(['"1"', 412, '"1"', stale("contact", id, 1, "7"), stale("contact", id, 1, "7")]);
    const added = await h.json("POST", `${contact}/tags`, { body: { tag: "vip" }, headers: { "if-match": '"1"', "idempotency-key": "tag-vip" } });
    const replayed = await h.json("POST", `${contact}/tags`, { body: { tag: "vip" }, headers: { "if-match": '"1"', "idempotency-key": "tag-vip" } });
    const linked = await h.json("POST", `${contact}/accounts`, { body: { account_id: account }, headers: { "if-match": '"2"' } });
    expect([added.status, added.headers.get("etag"), replayed.headers.get("idempotent-replayed"), replayed.headers.get("etag"), linked.status, linked.headers.get("etag")]).toEqual([200, '"2"', "true", '"2"', 200, '"3"']);
    const staleUntag = await h.json("DELETE", `${contact}/tags/vip`, { headers: { "if-match": '"2"' } });
    const staleUnlink = await h.json("DELETE", `${contact}/accounts/${account}`, { headers: { "if-match": '"2"' } });
    expect([staleUntag.body, staleUnlink.body]).toEqual([stale("contact", id, 3, "2"), stale("contact", id, 3, "2")]);
    const untagged = await h.json("DELETE", `${contact}/tags/vip`, { headers: { "if-match": '"3"' } });
    const unlinked = await h.json("DELETE", `${contact}/accounts/${account}`, { headers: { "if-match": "*" } });
    expect([untagged.status, untagged.headers.get("etag"), unlinked.status, unlinked.headers.get("etag"), unlinked.body.data.tags, unlinked.body.data.account_ids]).toEqual([200, '"4"', 200, '"5"', [], []]);
    expect(await eventTypes(h)).toEqual(["contact.created", "account.created", "contact.updated", "contact.updated", "contact.updated", "contact.updated"]);
  });
});

describe("conditional writes: resources without a version", () => {
  test("If-Match with entity tags on a write to a subscription or a user is 412 and changes nothing, as no tag can match; * lets it through", async () => {
    const subscription = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "https://192.0.43.10/crm", events: ["contact.created"] } })).body.data.id;
    const user = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@example.com" } })).body.data.id;
    const refused = (resources: string) => ({
      type: "urn:crm:problem:precondition-failed",
      title: "Precondition Failed",
      status: 412,
      detail: `${resources} carry no version (their reads have no ETag), so no entity tag in If-Match can match: send the request without If-Match, or with *.`,
    });
    const patch = await h.json("PATCH", `/public/v1/webhook-subscriptions/${subscription}`, { body: { description: "changed" }, headers: { "if-match": '"1"' } });
    const removal = await h.json("DELETE", `/public/v1/webhook-subscriptions/${subscription}`, { headers: { "if-match": '"1"' } });
    const userPatch = await h.json("PATCH", `/public/v1/users/${user}`, { body: { name: "Eve" }, headers: { "if-match": '"1"' } });
    expect([patch.status, patch.body, removal.body, userPatch.body]).toEqual([412, refused("Webhook subscriptions and deliveries"), refused("Webhook subscriptions and deliveries"), refused("Users")]);
    expect([(await h.json("GET", `/public/v1/webhook-subscriptions/${subscription}`)).body.data.description, (await h.json("GET", `/public/v1/users/${user}`)).body.data.name]).toEqual([null, "Grace"]);
    const anyVersion = await h.json("PATCH", `/public/v1/webhook-subscriptions/${subscription}`, { body: { description: "changed" }, headers: { "if-match": "*" } });
    const read = await h.json("GET", `/public/v1/webhook-subscriptions/${subscription}`, { headers: { "if-match": '"1"' } });
    expect([anyVersion.status, anyVersion.body.data.description, read.status]).toEqual([200, "changed", 200]);
  });

  test("If-Match with entity tags on a subscription, delivery or user that does not exist is 404, as without it (RFC 9110 section 13.2.1)", async () => {
    const tag = { "if-match": '"1"' };
    const missing = (kind: string, id: string) => ({ type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No ${kind} with id "${id}" exists.` });
    const removal = await h.json("DELETE", "/public/v1/webhook-subscriptions/sub_missing", { headers: tag });
    const pause = await h.json("POST", "/public/v1/webhook-subscriptions/sub_missing/pause", { headers: tag });
    const retry = await h.json("POST", "/public/v1/webhook-deliveries/dlv_missing/retry", { headers: tag });
    const userPatch = await h.json("PATCH", "/public/v1/users/usr_missing", { body: { name: "Eve" }, headers: tag });
    expect([removal.body, pause.body, retry.body, userPatch.body]).toEqual([
      missing("webhook subscription", "sub_missing"),
      missing("webhook subscription", "sub_missing"),
      missing("webhook delivery", "dlv_missing"),
      missing("user", "usr_missing"),
    ]);
  });

  test("If-Match with entity tags on a contact's or account's create or on a batch is 412 and creates nothing, as a new record has no version to match; * lets it through", async () => {
    const refused = (detail: string) => ({
      type: "urn:crm:problem:precondition-failed",
      title: "Precondition Failed",
      status: 412,
      detail: `${detail}, so no entity tag in If-Match can match: send the request without If-Match, or with *.`,
    });
    const tag = { "if-match": '"1"' };
    const contact = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" }, headers: tag });
    const account = await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" }, headers: tag });
    const contacts = await h.json("POST", "/public/v1/contacts/batch", { body: { items: [{ email: "ada@example.com" }] }, headers: tag });
    const accounts = await h.json("POST", "/public/v1/accounts/batch", { body: { items: [{ name: "Acme" }] }, headers: tag });
    const batch = refused("A batch has no version (one If-Match cannot name each item's)");
    expect([contact.status, contact.headers.get("etag"), contact.body, account.body, contacts.body, accounts.body]).toEqual([412, null, refused("A new contact has no version yet"), refused("A new account has no version yet"), batch, batch]);
    expect([(await h.json("GET", "/public/v1/contacts")).body.data, (await h.json("GET", "/public/v1/accounts")).body.data, await eventTypes(h)]).toEqual([[], [], []]);
    const anyVersion = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" }, headers: { "if-match": "*" } });
    const anyBatch = await h.json("POST", "/public/v1/accounts/batch", { body: { items: [{ name: "Acme" }] }, headers: { "if-match": "*" } });
    const malformed = await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" }, headers: { "if-match": "garbage" } });
    expect([anyVersion.status, anyBatch.status, malformed.status, malformed.body.errors]).toEqual([201, 200, 422, [{ header: "if-match", detail: 'must be * or entity tags such as "3" (the ETag of a read), separated by commas' }]]);
  });
});

describe("conditional writes: If-None-Match", () => {
  // RFC 9110 section 13.1.2: when the condition is false, the server must not perform the write (412).
  test("If-None-Match naming the current version (weakly compared) or * refuses a contact's or account's write with 412 and the current ETag; other tags let it through", async () => {
    const id = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data.id;
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data.id;
    const named = (kind: string, of: string, version: number) => ({
      type: "urn:crm:problem:precondition-failed",
      title: "Precondition Failed",
      status: 412,
      detail: `The ${kind} ${of} is at version ${version}, which If-None-Match names, so nothing changed.`,
      current_version: version,
    });
    const exists = (kind: string, of: string, version: number) => ({ ...named(kind, of, version), detail: `The ${kind} ${of} exists (at version ${version}), and If-None-Match: * asks that it does not, so nothing changed.` });
    const strong = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Eve" }, headers: { "if-none-match": '"1"' } });
    const weak = await h.json("DELETE", `/public/v1/contacts/${id}`, { headers: { "if-none-match": 'W/"1"' } });
    const any = await h.json("POST", `/public/v1/contacts/${id}/tags`, { body: { tag: "vip" }, headers: { "if-none-match": "*" } });
    const both = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Eve" }, headers: { "if-match": '"1"', "if-none-match": '"3", "1"' } });
    const accountWrite = await h.json("PATCH", `/public/v1/accounts/${account}`, { body: { name: "Evil" }, headers: { "if-none-match": '"1",' } });
    expect([strong.status, strong.headers.get("etag"), strong.body, weak.body, any.body, both.body, accountWrite.body]).toEqual([
      412,
      '"1"',
      named("contact", id, 1),
      named("contact", id, 1),
      exists("contact", id, 1),
      named("contact", id, 1),
      named("account", account, 1),
    ]);
    expect(await eventTypes(h)).toEqual(["contact.created", "account.created"]);
    const other = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Eve" }, headers: { "if-none-match": '"7", W/"8"' } });
    const missing = await h.json("DELETE", "/public/v1/contacts/con_01J00000000000000000000000", { headers: { "if-none-match": "*" } });
    const malformed = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: "Ada" }, headers: { "if-none-match": "2" } });
    expect([other.status, other.body.data.version, missing.status, malformed.status, malformed.body.errors]).toEqual([
      200,
      2,
      404,
      422,
      [{ header: "if-none-match", detail: 'must be * or entity tags such as "3" (the ETag of a read), separated by commas' }],
    ]);
  });

  test("If-None-Match: * refuses a write to a subscription, delivery or user that exists with 412, and one that does not exist stays 404; entity tags, which none of them can match, let it through", async () => {
    const subscription = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "https://192.0.43.10/crm", events: ["contact.created"] } })).body.data.id;
    const user = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@example.com" } })).body.data.id;
    await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } });
    const delivery = (await h.json("GET", "/public/v1/webhook-deliveries")).body.data[0].id;
    const any = { "if-none-match": "*" };
    // Named as the other 412s name what exists, without the version these do not have.
    const exists = (kind: string, id: string) => ({
      type: "urn:crm:problem:precondition-failed",
      title: "Precondition Failed",
      status: 412,
      detail: `The ${kind} ${id} exists, and If-None-Match: * asks that it does not, so nothing changed.`,
    });
    const removal = await h.json("DELETE", `/public/v1/webhook-subscriptions/${subscription}`, { headers: any });
    const pause = await h.json("POST", `/public/v1/webhook-subscriptions/${subscription}/pause`, { headers: any });
    const retried = await h.json("POST", `/public/v1/webhook-deliveries/${delivery}/retry`, { headers: any });
    const userPatch = await h.json("PATCH", `/public/v1/users/${user}`, { body: { name: "Eve" }, headers: any });
    expect([removal.status, removal.body, pause.body, retried.body, userPatch.body]).toEqual([
      412,
      exists("webhook subscription", subscription),
      exists("webhook subscription", subscription),
      exists("webhook delivery", delivery),
      exists("user", user),
    ]);
    const stored = [(await h.json("GET", `/public/v1/webhook-subscriptions/${subscription}`)).body.data.status, (await h.json("GET", `/public/v1/users/${user}`)).body.data.name];
    expect(stored).toEqual(["active", "Grace"]);
    const missing = await h.json("DELETE", "/public/v1/webhook-subscriptions/sub_missing", { headers: any });
    const retry = await h.json("POST", "/public/v1/webhook-deliveries/dlv_missing/retry", { headers: any });
    const tagged = await h.json("PATCH", `/public/v1/users/${user}`, { body: { name: "Eve" }, headers: { "if-none-match": '"1"' } });
    expect([missing.status, retry.status, tagged.status, tagged.body.data.name]).toEqual([404, 404, 200, "Eve"]);
  });
});
