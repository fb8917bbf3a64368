import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { contactsPage } from "../../console/contacts/service.ts";
import { startNameIndexing } from "../../server/contacts/service.ts";
import { createLogger } from "../../server/shared/log.ts";
import type { Database } from "../../server/db/sql.ts";
import { createHarness, type Harness } from "../support/harness.ts";

// SQLite adds new contacts' names to the trigram index in batches (migration 0017): a create
// leaves its rowid in contacts_full_name_pending, and a name search or the background job indexes
// what waits. Whatever waits, a name search answers as if every name were indexed.

let h: Harness;
beforeEach(async () => (h = await createHarness()));
afterEach(async () => await h.close());

const waiting = () => h.db.sqlite.query<{ n: number }, []>("SELECT count(*) AS n FROM contacts_full_name_pending").get()!.n;
const indexed = () => h.db.sqlite.query<{ n: number }, []>("SELECT count(*) AS n FROM contacts_full_name").get()!.n;

async function create(first_name: string, last_name: string): Promise<{ id: string }> {
  const res = await h.json("POST", "/public/v1/contacts", { body: { first_name, last_name } });
  expect(res.status).toBe(201);
  return res.body.data;
}

async function namesFound(needle: string): Promise<{ ids: string[]; total: number }> {
  const res = await h.json("GET", `/public/v1/contacts?per_page=100&sort_by=created_at&sort_direction=asc&full_name=${encodeURIComponent(needle)}`);
  expect(res.status).toBe(200);
  return { ids: res.body.data.map((c: { id: string }) => c.id), total: res.body.meta.total };
}

describe("the name index in batches", () => {
  test("a create leaves its name waiting; the next name search indexes it first and finds it", async () => {
    const ada = await create("Ada", "Lovelace");
    const grace = await create("Grace", "Hopper");
    expect({ waiting: waiting(), indexed: indexed() }).toEqual({ waiting: 2, indexed: 0 });
    expect(await namesFound("lovel")).toEqual({ ids: [ada.id], total: 1 });
    expect({ waiting: waiting(), indexed: indexed() }).toEqual({ waiting: 0, indexed: 2 });
    expect(await namesFound("lovelace grace")).toEqual({ ids: [], total: 0 });
    expect(await namesFound("grace hop")).toEqual({ ids: [grace.id], total: 1 });
    // A needle under three characters scans the index's stored names: it sees new names too.
    const alan = await create("Al", "Kay");
    expect(await namesFound("ay")).toEqual({ ids: [alan.id], total: 1 });
  });

  test("a contact renamed or deleted while its name waits is found by its new name only, and the deleted one nowhere", async () => {
    const renamed = await create("Edsger", "Dijkstra");
    const deleted = await create("Barbara", "Liskov");
    expect((await h.json("PATCH", `/public/v1/contacts/${renamed.id}`, { body: { last_name: "Wybe" } })).status).toBe(200);
    expect((await h.request("DELETE", `/public/v1/contacts/${deleted.id}`)).status).toBe(204);
    expect(waiting()).toBe(1);
    expect(await namesFound("dijks")).toEqual({ ids: [], total: 0 });
    expect(await namesFound("edsger wybe")).toEqual({ ids: [renamed.id], total: 1 });
    expect(await namesFound("liskov")).toEqual({ ids: [], total: 0 });
    expect({ waiting: waiting(), indexed: indexed() }).toEqual({ waiting: 0, indexed: 1 });
    // Once indexed, a rename and a delete change the index itself.
    expect((await h.json("PATCH", `/public/v1/contacts/${renamed.id}`, { body: { first_name: "Ed" } })).status).toBe(200);
    expect(await namesFound("edsger")).toEqual({ ids: [], total: 0 });
    expect(await namesFound("ed wybe")).toEqual({ ids: [renamed.id], total: 1 });
    expect((await h.request("DELETE", `/public/v1/contacts/${renamed.id}`)).status).toBe(204);
    expect(await namesFound("wybe")).toEqual({ ids: [], total: 0 });
    expect(indexed()).toBe(0);
  });

  test("the rowid of a deleted waiting contact can wait again for the next contact", async () => {
    const first = await create("Linus", "Torvalds");
    expect((await h.request("DELETE", `/public/v1/contacts/${first.id}`)).status).toBe(204);
    // SQLite gives the next row the rowid of the deleted last one.
    const second = await create("Linus", "Pauling");
    expect(waiting()).toBe(1);
    expect(await namesFound("linus")).toEqual({ ids: [second.id], total: 1 });
  });

  test("searches running among creates find every contact whose create was answered before they were sent", async () => {
    const answered: string[] = [];
    const creates = Array.from({ length: 90 }, async (_, i) => {
      await Bun.sleep(i % 7);
      answered.push((await create("Mixed", `Crowd${i}`)).id);
    });
    const searches = Array.from({ length: 30 }, async (_, i) => {
      await Bun.sleep(i % 11);
      const before = [...answered];
      const found = new Set((await namesFound("crowd")).ids);
      expect(before.filter((id) => !found.has(id))).toEqual([]);
    });
    await Promise.all([...creates, ...searches]);
    const all = await namesFound("mixed crowd");
    expect({ ids: [...all.ids].sort(), total: all.total }).toEqual({ ids: [...answered].sort(), total: 90 });
  });

  test("the console's name search indexes what waits first", async () => {
    const ada = await create("Ada", "Lovelace");
    const view = await contactsPage(h.rt.db, { q: "lovelace" }, "test");
    expect({ by: view.by, ids: view.contacts.map((c) => c.id), total: view.total }).toEqual({ by: "name", ids: [ada.id], total: 1 });
    expect(waiting()).toBe(0);
  });

  test("the background job indexes waiting names without a search", async () => {
    await create("Ada", "Lovelace");
    await create("Grace", "Hopper");
    const stop = startNameIndexing(h.rt);
    try {
      for (let tries = 0; waiting() > 0 && tries < 200; tries++) await Bun.sleep(25);
    } finally {
      await stop();
    }
    expect({ waiting: waiting(), indexed: indexed() }).toEqual({ waiting: 0, indexed: 2 });
  });
  test("while storage refuses the batches, the background job logs it once, not at every try; writable again, it indexes what waited", async () => {
    await create("Ada", "Lovelace");
    const lines: Record<string, any>[] = [];
    const log = createLogger("debug", (line) => lines.push(JSON.parse(line)));
    let tries = 0;
    // Counts the batches tried; every other member is the harness's own database.
    const db = new Proxy(h.rt.db, {
      get(target, key) {
        if (key === "writeIndex") return (...args: Parameters<Database["writeIndex"]>) => (tries++, target.writeIndex(...args));
        const value = Reflect.get(target, key, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    // query_only stands in for the read-only file: SQLite refuses the write with SQLITE_READONLY, as on one.
    h.db.sqlite.run("PRAGMA query_only = ON");
    const stop = startNameIndexing({ ...h.rt, db, log });
    try {
      for (let waited = 0; tries < 6 && waited < 30_000; waited += 25) await Bun.sleep(25);
      expect(tries).toBeGreaterThanOrEqual(6);
      h.db.sqlite.run("PRAGMA query_only = OFF");
      for (let waited = 0; waiting() > 0 && waited < 30_000; waited += 25) await Bun.sleep(25);
    } finally {
      h.db.sqlite.run("PRAGMA query_only = OFF");
      await stop();
    }
    expect(lines.map((l) => ({ level: l.level, msg: l.msg, code: l.code }))).toEqual([{ level: "error", msg: "indexing contact names failed", code: "SQLITE_READONLY" }]);
    expect({ waiting: waiting(), indexed: indexed() }).toEqual({ waiting: 0, indexed: 1 });
  });
});
