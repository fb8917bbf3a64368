import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { backupDatabase } from "../../server/ops/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";

// What a contact's delete leaves of it in the SQLite file, read as anyone holding the file (or a
// backup of it) could: the name search index's segments (FTS5 secure-delete, migration 0031) and
// the space the delete frees in the pages it writes (PRAGMA secure_delete = FAST).

let h: Harness;
beforeEach(async () => (h = await createHarness()));
afterEach(async () => await h.close());

async function create(body: Record<string, unknown>): Promise<{ id: string }> {
  const res = await h.json("POST", "/public/v1/contacts", { body });
  expect(res.status).toBe(201);
  return res.body.data;
}

async function namesFound(needle: string): Promise<string[]> {
  const res = await h.json("GET", `/public/v1/contacts?full_name=${encodeURIComponent(needle)}`);
  expect(res.status).toBe(200);
  return res.body.data.map((c: { id: string }) => c.id);
}

/** segmentsHolding counts the name index's stored segment blocks whose bytes hold the trigram. */
const segmentsHolding = (db: Database, trigram: string) => db.query<{ n: number }, [string]>("SELECT count(*) AS n FROM contacts_full_name_data WHERE instr(block, CAST(? AS BLOB)) > 0").get(trigram)!.n;
// Trigrams of "Qxzvwk Jjyhpf" and "Fgbmuy Dkcoev" that share no first letter with the trigram before them in the index's order, so each is stored whole.
const trigramsIn = (db: Database) => Object.fromEntries(["qxz", "jjy", "fgb", "dkc"].map((trigram) => [trigram, segmentsHolding(db, trigram)]));

/** fileCopies counts the occurrences of `text` in the bytes of a database file. */
const fileCopies = (path: string, text: string) => readFileSync(path).toString("latin1").split(text).length - 1;

describe("what a contact's delete leaves in the SQLite file", () => {
  test("a deleted contact's name, and a renamed one's old name, leave the name index's segments at once, and a backup taken after holds neither", async () => {
    const deleted = await create({ first_name: "Qxzvwk", last_name: "Jjyhpf" });
    const renamed = await create({ first_name: "Fgbmuy", last_name: "Dkcoev" });
    expect(await namesFound("qxz")).toEqual([deleted.id]);
    await create({ first_name: "Ada", last_name: "Lovelace" });
    expect((await namesFound("lovel")).length).toBe(1);
    expect(trigramsIn(h.db.sqlite)).toEqual({ qxz: 1, jjy: 1, fgb: 1, dkc: 1 });

    expect((await h.request("DELETE", `/public/v1/contacts/${deleted.id}`)).status).toBe(204);
    expect((await h.json("PATCH", `/public/v1/contacts/${renamed.id}`, { body: { last_name: "Smith" } })).status).toBe(200);
    expect(trigramsIn(h.db.sqlite)).toEqual({ qxz: 0, jjy: 0, fgb: 1, dkc: 0 });
    expect(await namesFound("fgbmuy smi")).toEqual([renamed.id]);

    const file = join(h.dataDir, "after-delete.sqlite");
    await backupDatabase(h.dataDir, file);
    const backup = new Database(file, { readonly: true });
    try {
      expect(trigramsIn(backup)).toEqual({ qxz: 0, jjy: 0, fgb: 1, dkc: 0 });
    } finally {
      backup.close();
    }
  });

  test("a deleted contact's email is overwritten in the pages its delete writes: after a checkpoint the file holds it only in the rows still live (its events, its tombstone and the tombstone's index entry), and none once its events are erased", async () => {
    const email = "erase.me.marker@example.com";
    const others = async (name: string) => {
      const items = Array.from({ length: 100 }, (_, i) => ({ first_name: `${name}${i}`, email: `${name}${i}@example.com` }));
      expect((await h.json("POST", "/public/v1/contacts/batch", { body: { items } })).status).toBe(200);
    };
    await others("before");
    const contact = await create({ first_name: "Erase", last_name: "Me", email, tags: ["vip"] });
    await others("after");
    expect((await h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { phone: "+15550001111" } })).status).toBe(200);
    expect((await h.request("DELETE", `/public/v1/contacts/${contact.id}`)).status).toBe(204);

    expect(h.db.sqlite.query("PRAGMA wal_checkpoint(TRUNCATE)").get()).toEqual({ busy: 0, log: 0, checkpointed: 0 });
    const live = join(h.dataDir, "live.sqlite");
    h.db.sqlite.run(`VACUUM INTO '${live}'`);
    const events = h.db.sqlite.query<{ n: number }, [string]>("SELECT count(*) AS n FROM events WHERE instr(payload, ?) > 0").get(email)!.n;
    const tombstones = h.db.sqlite.query<{ n: number }, [string]>("SELECT count(*) AS n FROM tombstones WHERE email = ?").get(email)!.n;
    expect({ file: fileCopies(join(h.dataDir, "crm.sqlite"), email), live: fileCopies(live, email), events, tombstones }).toEqual({ file: 4, live: 4, events: 2, tombstones: 1 });

    expect((await h.json("POST", `/public/v1/contacts/deleted/${contact.id}/erase`)).status).toBe(200);
    expect(h.db.sqlite.query("PRAGMA wal_checkpoint(TRUNCATE)").get()).toEqual({ busy: 0, log: 0, checkpointed: 0 });
    expect(fileCopies(join(h.dataDir, "crm.sqlite"), email)).toBe(0);
  });
});
