import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createAccount, updateAccount } from "../../server/accounts/service.ts";
import { listAccounts } from "../../server/accounts/store.ts";
import { ACCOUNT_SORTS } from "../../server/accounts/model.ts";
import { createHarness, UNKNOWN_ORIGIN, type Harness } from "../support/harness.ts";
import { capturing, queryPlan } from "../support/query-plans.ts";
import { ISO, contactsNow, eventData, eventTypes, expectProblem, onNextCommit, postAccount, updatedContacts, validation } from "./support.ts";
import { sqliteOnly } from "../support/backend.ts";

/** CHUNK is how many contacts each write of an account's delete unlinks here (UNLINK_CHUNK in production): 35 contacts take four. */
const CHUNK = 10;

let h: Harness;
beforeEach(async () => {
  h = await createHarness({ rateReadBurst: 10_000, rateWriteBurst: 10_000 }, { unlinkChunk: CHUNK });
});
afterEach(async () => await h.close());

const MISSING = "acc_00000000000000000000000000";
const page = (total: number, perPage = 25, nextCursor: string | null = null) => ({ current_page: 1, last_page: Math.max(1, Math.ceil(total / perPage)), per_page: perPage, total, next_cursor: nextCursor });

const account = (body: Record<string, unknown>) => postAccount(h, body);

describe("accounts sync: happy paths", () => {
  test("POST answers Location and sends account.created with the account", async () => {
    const res = await h.json("POST", "/public/v1/accounts", { body: { name: "Acme", domain: "acme.test", tier: "gold" } });
    expect(res.headers.get("location")).toBe(`/public/v1/accounts/${res.body.data.id}`);
    expect(await eventData(h)).toEqual([{ type: "account.created", data: res.body.data }]);
  });

  test("PATCH replaces given fields, null clears domain and further properties, and sends account.updated; a no-op sends nothing", async () => {
    const a = await account({ name: "Acme", domain: "acme.test", tier: "gold", region: "eu" });
    await Bun.sleep(2);
    const res = await h.json("PATCH", `/public/v1/accounts/${a.id}`, { body: { name: "Acme Corp", domain: null, tier: "platinum", region: null } });
    expect(res.status).toBe(200);
    const expected = { id: a.id, name: "Acme Corp", domain: null, tier: "platinum", version: 2, created_at: a.created_at, updated_at: res.body.data.updated_at };
    expect(res.body).toEqual({ data: expected });
    expect(res.body.data.updated_at).toMatch(ISO);
    expect(res.body.data.updated_at > a.updated_at).toBe(true);
    expect((await h.json("GET", `/public/v1/accounts/${a.id}`)).body).toEqual({ data: expected });
    // the name filter finds it by its new name
    expect((await h.json("GET", "/public/v1/accounts?name=ACME%20CORP")).body.data).toEqual([expected]);
    const again = await h.json("PATCH", `/public/v1/accounts/${a.id}`, { body: { name: "Acme Corp", tier: "platinum" } });
    expect(again.body).toEqual({ data: expected });
    expect(await eventData(h)).toEqual([
      { type: "account.created", data: a },
      { type: "account.updated", data: expected },
    ]);
  });

  test("DELETE answers 204, unlinks its contacts (each updated, with contact.updated), sends account.deleted and leaves a tombstone", async () => {
    const a = await account({ name: "Acme" });
    const b = await account({ name: "Globex" });
    const linked = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", account_ids: [b.id, a.id] } })).body.data;
    const other = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Bob", account_ids: [b.id] } })).body.data;
    await Bun.sleep(2);
    const res = await h.request("DELETE", `/public/v1/accounts/${a.id}`);
    expect([res.status, await res.text()]).toEqual([204, ""]);
    expectProblem(await h.json("GET", `/public/v1/accounts/${a.id}`), 404, "not-found");
    const after = (await h.json("GET", `/public/v1/contacts/${linked.id}`)).body.data;
    expect(after).toEqual({ ...linked, account_ids: [b.id], version: linked.version + 1, updated_at: after.updated_at });
    expect(after.updated_at > linked.updated_at).toBe(true);
    expect((await h.json("GET", `/public/v1/contacts/${other.id}`)).body.data).toEqual(other);
    const events = (await eventData(h)).slice(4);
    const deletedAt = (events[1]!.data as { deleted_at: string }).deleted_at;
    expect(events).toEqual([
      { type: "contact.updated", data: after },
      { type: "account.deleted", data: { id: a.id, version: 2, deleted_at: deletedAt } },
    ]);
    expect(deletedAt).toBe(after.updated_at);
    expect((await h.json("GET", "/public/v1/accounts/deleted")).body).toEqual({ data: [{ id: a.id, deleted_at: deletedAt, version: 2 }], meta: page(1) });
    // the relation table and the row's copy agree, and the contact is no longer found by the account
    expect((await h.rt.db.all("SELECT account_id FROM contact_accounts WHERE contact_id = ?", [linked.id]))).toEqual([{ account_id: b.id }]);
    expect((await h.json("GET", `/public/v1/contacts?account_id=${a.id}`)).body).toEqual({ data: [], meta: page(0) });
  });

  test("the list sorts by created_at, updated_at, name and domain both ways, stable, and pages by cursor to the same order", async () => {
    const made = [];
    for (const [name, domain] of [["beta", "b.test"], ["Alpha", null], ["gamma", "a.test"], ["alpha", "c.test"], ["Älpha", null]] as const) {
      made.push(await account({ name, domain }));
      await Bun.sleep(2);
    }
    const touched = (await h.json("PATCH", `/public/v1/accounts/${made[1].id}`, { body: { tier: "x" } })).body.data;
    made[1] = touched;
    const byId = (a: any, b: any) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
    const key = { created_at: (a: any) => a.created_at, updated_at: (a: any) => a.updated_at, name: (a: any) => a.name.normalize("NFC").toLowerCase(), domain: (a: any) => a.domain };
    for (const sort of ACCOUNT_SORTS) {
      for (const direction of ["asc", "desc"] as const) {
        const expected = [...made]
          .sort((a, b) => {
            const [ka, kb] = [key[sort](a), key[sort](b)];
            const r = ka === kb ? byId(a, b) : ka === null ? -1 : kb === null ? 1 : ka < kb ? -1 : 1;
            return direction === "asc" ? r : -r;
          })
          .map((a) => a.id);
        const whole = (await h.json("GET", `/public/v1/accounts?sort_by=${sort}&sort_direction=${direction}`)).body;
        expect({ sort, direction, ids: whole.data.map((a: any) => a.id) }).toEqual({ sort, direction, ids: expected });
        const walked: string[] = [];
        let cursor: string | null = null;
        do {
          const res: any = (await h.json("GET", `/public/v1/accounts?sort_by=${sort}&sort_direction=${direction}&per_page=2${cursor ? `&cursor=${cursor}` : ""}`)).body;
          walked.push(...res.data.map((a: any) => a.id));
          cursor = res.meta.next_cursor;
        } while (cursor);
        expect({ sort, direction, ids: walked }).toEqual({ sort, direction, ids: expected });
      }
    }
  });

  test("a next_cursor is accepted with the longest name filter and sort values: a name's control characters, or NFC tripling it", async () => {
    // a control character is 6 bytes of JSON; U+1D160 is 2 characters that NFC makes 3 of 4 bytes each
    for (const name of ["\u0001".repeat(200), "\u{1D160}".repeat(100)]) {
      const made: string[] = [];
      for (let i = 0; i < 3; i++) made.push((await account({ name })).id);
      // each page: its status, its accounts, and whether its next_cursor is within the README's 1,687 characters
      const pages: { status: number; ids: string[]; short: boolean }[] = [];
      let cursor: string | null = null;
      do {
        const res: any = await h.json("GET", `/public/v1/accounts?name=${encodeURIComponent(name)}&sort_by=name&sort_direction=desc&per_page=1${cursor ? `&cursor=${cursor}` : ""}`);
        cursor = res.body.meta?.next_cursor ?? null;
        pages.push({ status: res.status, ids: res.body.data?.map((a: any) => a.id), short: (cursor ?? "").length <= 1687 });
      } while (cursor);
      expect(pages).toEqual([...made].reverse().map((id) => ({ status: 200, ids: [id], short: true })));
    }
  });

  test("updated_after and created_after find what changed after a time, with every sort", async () => {
    const a = await account({ name: "A" });
    await Bun.sleep(3);
    const b = await account({ name: "B" });
    await Bun.sleep(3);
    const a2 = (await h.json("PATCH", `/public/v1/accounts/${a.id}`, { body: { name: "A2" } })).body.data;
    const since = encodeURIComponent(b.created_at);
    expect((await h.json("GET", `/public/v1/accounts?updated_after=${since}&sort_by=updated_at`)).body).toEqual({ data: [a2], meta: page(1) });
    expect((await h.json("GET", `/public/v1/accounts?created_after=${encodeURIComponent(a.created_at)}&sort_by=name&sort_direction=desc`)).body).toEqual({ data: [b], meta: page(1) });
  });

  sqliteOnly("every account sort, direction, cursor and filter is served by an index", async () => {
    await account({ name: "Acme", domain: "acme.test" });
    for (const sortBy of ACCOUNT_SORTS) {
      for (const direction of ["asc", "desc"] as const) {
        for (const cursor of [null, { value: sortBy.endsWith("_at") ? 1 : "m", id: "acc_x" }, { value: null, id: "acc_x" }]) {
          for (const filters of [{}, { name: "acme" }, { domain: "acme.test" }, { updatedAfter: 0 }, { createdAfter: 0, name: "acme" }]) {
            const { db, captured } = capturing(h.rt.db);
            await listAccounts(db, filters, { sortBy, direction, cursor, limit: 10, offset: 0 });
            for (const c of captured) {
              const plan = queryPlan(h.db.sqlite, c);
              expect({ sortBy, direction, cursor, filters, scans: plan.filter((line) => /^SCAN accounts\b(?! USING)/.test(line)) }).toEqual({ sortBy, direction, cursor, filters, scans: [] });
            }
          }
        }
      }
    }
  });
});

describe("accounts sync: errors", () => {
  test("PATCH of an unknown account is 404; bad fields, read-only fields and unknown list parameters are 422; nothing changes", async () => {
    const a = await account({ name: "Acme" });
    expect((await h.json("PATCH", `/public/v1/accounts/${MISSING}`, { body: { name: "X" } })).body).toEqual({ type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No account with id "${MISSING}" exists.` });
    expect((await h.json("PATCH", `/public/v1/accounts/${a.id}`, { body: { name: "" } })).body).toEqual(validation([{ pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (an account needs a name)" }]));
    expect((await h.json("PATCH", `/public/v1/accounts/${a.id}`, { body: { domain: "not a domain" } })).body).toEqual(validation([{ pointer: "/domain", detail: "must be a domain name like example.com of at most 253 characters, counted in ASCII form (müller.de as xn--mller-kva.de), or null" }]));
    expect((await h.json("PATCH", `/public/v1/accounts/${a.id}`, { body: { id: "acc_other", created_at: "2020-01-01T00:00:00Z" } })).body).toEqual(
      validation([
        { pointer: "/id", detail: "is read-only" },
        { pointer: "/created_at", detail: "is read-only" },
      ]),
    );
    expect((await h.json("GET", "/public/v1/accounts?sort_by=industry")).body).toEqual(
      validation([{ parameter: "sort_by", detail: "must be one of: created_at, updated_at, name, domain" }], "The request has invalid fields."),
    );
    expect((await h.json("GET", "/public/v1/accounts?updated_after=yesterday")).body).toEqual(validation([{ parameter: "updated_after", detail: "must be an RFC 3339 date-time, e.g. 2026-11-21T10:00:00Z" }]));
    expect((await h.json("GET", `/public/v1/accounts/${a.id}`)).body).toEqual({ data: a });
    expect(await eventTypes(h)).toEqual(["account.created"]);
  });

  test("a name of spaces alone is refused as an empty one is, on POST and PATCH; nothing changes", async () => {
    const nameless = validation([{ pointer: "/name", detail: "must be a string of 1 to 200 characters, not spaces alone (an account needs a name)" }]);
    // U+0085 (next line) is white space to nameKey but not to a regular expression's \s: taken, such names had the empty key, one name.
    for (const name of ["", "   ", "\t\n", "\u00a0\u3000", "\u0085", " \u0085 "]) {
      const res = await h.json("POST", "/public/v1/accounts", { body: { name, domain: "acme.test" } });
      expect({ name, status: res.status, problem: res.body }).toEqual({ name, status: 422, problem: nameless });
    }
    const a = await account({ name: "  Acme  " });
    expect(a.name).toBe("  Acme  ");
    for (const name of ["", "   "]) {
      const res = await h.json("PATCH", `/public/v1/accounts/${a.id}`, { body: { name, tier: "gold" } });
      expect({ name, status: res.status, problem: res.body }).toEqual({ name, status: 422, problem: nameless });
    }
    expect((await h.json("GET", `/public/v1/accounts/${a.id}`)).body).toEqual({ data: a });
    expect(await eventTypes(h)).toEqual(["account.created"]);
  });

  test("DELETE of an unknown account is 404 and a second DELETE too; the deleted list refuses a bad since, and one older than the retention is 410", async () => {
    const a = await account({ name: "Acme" });
    expect((await h.json("DELETE", `/public/v1/accounts/${MISSING}`)).body).toEqual({ type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No account with id "${MISSING}" exists.` });
    expect((await h.request("DELETE", `/public/v1/accounts/${a.id}`)).status).toBe(204);
    expect((await h.json("DELETE", `/public/v1/accounts/${a.id}`)).status).toBe(404);
    expect(await eventTypes(h)).toEqual(["account.created", "account.deleted"]);
    expect((await h.json("GET", "/public/v1/accounts/deleted?since=last%20week")).body).toEqual(validation([{ parameter: "since", detail: "must be an RFC 3339 date-time, e.g. 2026-11-21T10:00:00Z" }]));
    const old = new Date(Date.now() - 91 * 86_400_000).toISOString();
    const gone = await h.json("GET", `/public/v1/accounts/deleted?since=${old}`);
    expect(gone.status).toBe(410);
    expect(gone.headers.get("content-type")).toBe("application/problem+json");
    const horizon = gone.body.retained_since;
    expect(gone.body).toEqual({
      type: "urn:crm:problem:deletions-expired",
      title: "Gone",
      status: 410,
      detail: `Deletions are kept for 90 days; those before ${horizon} may be gone. List every account to resync, then poll from the time the resync started.`,
      errors: [{ parameter: "since", detail: `must be ${horizon} or later` }],
      retained_since: horizon,
    });
  });
});

describe("accounts sync: a delete unlinks its contacts a chunk per write", () => {
  /** linkedContacts creates `n` contacts linked to the account, every other one to `also` after it. */
  async function linkedContacts(n: number, accountId: string, also: string): Promise<any[]> {
    const made = [];
    for (let i = 0; i < n; i++) made.push((await h.json("POST", "/public/v1/contacts", { body: { first_name: `C${i}`, account_ids: i % 2 ? [accountId, also] : [accountId] } })).body.data);
    return made;
  }

  const byId = (a: { id: string }, b: { id: string }) => a.id.localeCompare(b.id);
  const updates = (n: number) => Array<string>(n).fill("contact.updated");

  test("35 contacts are unlinked 10 per write: a write sent once the first chunk commits commits before the next chunk; each contact ends unlinked with one contact.updated, account.deleted last", async () => {
    const a = await account({ name: "Acme" });
    const b = await account({ name: "Globex" });
    const linked = await linkedContacts(35, a.id, b.id);
    const before = (await eventData(h)).length;
    // The first commit after the delete begins sends another write, which waits for one chunk, not the whole delete.
    const meanwhile = onNextCommit(h, () => createAccount(h.rt, { name: "Meanwhile" }, null, UNKNOWN_ORIGIN));
    const res = await h.request("DELETE", `/public/v1/accounts/${a.id}`);
    expect([res.status, await res.text()]).toEqual([204, ""]);
    const created = (await meanwhile()).body.data;
    const after = await contactsNow(h, linked);
    expect(after).toEqual(linked.map((c, i) => ({ ...c, account_ids: i % 2 ? [b.id] : [], version: c.version + 1, updated_at: after[i].updated_at })));
    const events = (await eventData(h)).slice(before);
    expect(events.map((e) => e.type)).toEqual([...updates(CHUNK), "account.created", ...updates(35 - CHUNK), "account.deleted"]);
    expect(updatedContacts(events)).toEqual([...after].sort(byId));
    expect(events[CHUNK]).toEqual({ type: "account.created", data: created });
    const deletedAt = (events.at(-1)!.data as { deleted_at: string }).deleted_at;
    expect(events.at(-1)).toEqual({ type: "account.deleted", data: { id: a.id, version: 2, deleted_at: deletedAt } });
    expect(after.every((c) => c.updated_at <= deletedAt)).toBe(true);
    expect((await h.json("GET", `/public/v1/contacts?account_id=${a.id}`)).body).toEqual({ data: [], meta: page(0) });
    expect((await h.json("GET", "/public/v1/accounts/deleted")).body).toEqual({ data: [{ id: a.id, deleted_at: deletedAt, version: 2 }], meta: page(1) });
  });

  test("If-Match and If-None-Match are checked in the first write only: a stale one is 412 and changes nothing; once it held, a rename between chunks does not stop the delete, which finishes with account.deleted after the rename", async () => {
    const a = await account({ name: "Acme" });
    const b = await account({ name: "Globex" });
    const linked = await linkedContacts(35, a.id, b.id);
    const before = (await eventData(h)).length;
    const stale = await h.json("DELETE", `/public/v1/accounts/${a.id}`, { headers: { "if-match": '"2"' } });
    expect([stale.status, stale.headers.get("etag"), stale.body.current_version]).toEqual([412, '"1"', 1]);
    const named = await h.json("DELETE", `/public/v1/accounts/${a.id}`, { headers: { "if-none-match": '"1"' } });
    expect([named.status, named.body.detail]).toEqual([412, `The account ${a.id} is at version 1, which If-None-Match names, so nothing changed.`]);
    expect((await eventData(h)).length).toBe(before);
    expect((await h.json("GET", `/public/v1/contacts?account_id=${a.id}&per_page=1`)).body.meta.total).toBe(35);

    // Version 2 after the first chunk: If-Match "1" (and If-None-Match "2") would refuse a write made now.
    const renamed = onNextCommit(h, () => updateAccount(h.rt, a.id, { name: "Acme Renamed" }, null, UNKNOWN_ORIGIN));
    const res = await h.request("DELETE", `/public/v1/accounts/${a.id}`, { headers: { "if-match": '"1"', "if-none-match": '"2"' } });
    expect([res.status, await res.text()]).toEqual([204, ""]);
    expect((await renamed()).version).toBe(2);
    expect((await h.json("GET", `/public/v1/accounts/${a.id}`)).status).toBe(404);
    const after = await contactsNow(h, linked);
    expect(after).toEqual(linked.map((c, i) => ({ ...c, account_ids: i % 2 ? [b.id] : [], version: c.version + 1, updated_at: after[i].updated_at })));
    const events = (await eventData(h)).slice(before);
    expect(events.map((e) => e.type)).toEqual([...updates(CHUNK), "account.updated", ...updates(35 - CHUNK), "account.deleted"]);
    expect(updatedContacts(events)).toEqual([...after].sort(byId));
    expect(events.at(-1)!.data).toEqual({ id: a.id, version: 3, deleted_at: expect.any(String) });
  });
});

describe("accounts sync: security", () => {
  test("PATCH, DELETE and the deleted list need a token and change nothing without one", async () => {
    const a = await account({ name: "Acme" });
    for (const [method, path] of [["PATCH", `/public/v1/accounts/${a.id}`], ["DELETE", `/public/v1/accounts/${a.id}`], ["GET", "/public/v1/accounts/deleted"]] as const) {
      const res = await h.json(method, path, { body: method === "PATCH" ? { name: "Evil" } : undefined, headers: { authorization: "Bearer crm_wrong" } });
      expectProblem(res, 401, "unauthorized");
      expect(res.headers.get("www-authenticate")).toStartWith("Bearer");
    }
    expect((await h.json("GET", `/public/v1/accounts/${a.id}`)).body).toEqual({ data: a });
    expect(await eventTypes(h)).toEqual(["account.created"]);
  });

  test("filter and property values are data, never SQL", async () => {
    const a = await account({ name: "Acme" });
    const evil = "x' OR 1=1 --";
    expect((await h.json("PATCH", `/public/v1/accounts/${a.id}`, { body: { note: evil } })).body.data.note).toBe(evil);
    expect((await h.json("GET", `/public/v1/accounts?name=${encodeURIComponent(evil)}`)).body).toEqual({ data: [], meta: page(0) });
  });
});
