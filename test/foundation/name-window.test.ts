import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { CONTACT_SORTS } from "../../server/contacts/model.ts";
import { countContacts, indexWaitingNames, listContacts } from "../../server/contacts/store.ts";
import type { CursorPosition } from "../../server/http/list-query.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing } from "../support/query-plans.ts";

// A name search's page reads a window of the contacts' sort index while the window's entries are
// fewer than 8 times the matches, and fetches its matches otherwise, or after a window that held
// too few of them (matches crowding the far end of the order). Whichever it reads, the page is the same.
// SQLite only (test/run.ts): PostgreSQL plans a name search itself.

const CONTACTS = 270;
let h: Harness;

/** NEEDLES are the searches, by the contacts (i from 0, oldest first) whose last_name holds them. */
const NEEDLES: Record<string, string> = {
  Halfway: "1 in 2",
  Seventh: "1 in 7, above 1 in 8",
  Ninthly: "1 in 9, under 1 in 8",
  Rarely: "1 in 45",
  Oldtimer: "the oldest 30 (1 in 9), the far end of a newest-first order",
  Newcomer: "the newest 30, the far end of an oldest-first order",
  hl: "Ninthly's, too short for trigrams",
  dt: "Oldtimer's, too short for trigrams",
};

/** lastName is contact i's last name: the words of the needles that match it. */
function lastName(i: number): string {
  const words = [
    ...(i % 2 === 0 ? ["Halfway"] : []),
    ...(i % 7 === 0 ? ["Seventh"] : []),
    ...(i % 9 === 0 ? ["Ninthly"] : []),
    ...(i % 45 === 0 ? ["Rarely"] : []),
    ...(i < 30 ? ["Oldtimer"] : []),
    ...(i >= CONTACTS - 30 ? ["Newcomer"] : []),
  ];
  return [...words, "Z"].join(" ");
}

beforeAll(async () => {
  h = await createHarness();
  for (let from = 0; from < CONTACTS; from += 90) {
    // first names in either case and some missing, emails some missing: the nullable and case-blind sorts have ties and NULLs
    const items = Array.from({ length: 90 }, (_, k) => from + k).map((i) => ({
      first_name: i % 3 === 0 ? `ann${i % 10}` : i % 3 === 1 ? `Bob${i % 10}` : null,
      last_name: lastName(i),
      email: i % 4 ? `p${i}@example.com` : null,
    }));
    const res = await h.json("POST", "/public/v1/contacts/batch", { body: { items } });
    expect(res.status).toBe(200);
    await Bun.sleep(2);
  }
  await h.rt.db.write(indexWaitingNames);
});
afterAll(async () => await h.close());

const CURSORS: Record<string, (sort: string) => CursorPosition | null> = {
  "no cursor": () => null,
  "cursor on a value": (sort) => ({ value: sort.endsWith("_at") ? Date.now() - 60_000 : "b", id: "con_01M00000000000000000000000" }),
  "cursor on NULL": () => ({ value: null, id: "con_01M00000000000000000000000" }),
};

/** PAGES are [limit, offset]: a first page, one further on, one deep among the broad needles' matches, and one past most needles' ends. */
const PAGES = [[5, 0], [5, 15], [26, 52], [10, 120]] as const;

/** pathOf names how a page was read, from its statements: a window that filled it, a window then the fetch, or the fetch alone. */
function pathOf(statements: string[]): "window" | "window, then fetched" | "fetched" {
  const pages = statements.filter((sql) => sql.startsWith("SELECT c.id"));
  const windowed = pages[0]!.includes(" FROM (SELECT c.rowid AS rid, c.id, ");
  if (!windowed) return "fetched";
  return pages.length > 1 && !pages[1]!.includes(" FROM (SELECT c.rowid AS rid, c.id, ") ? "window, then fetched" : "window";
}

describe("name search: a window of the sort index or the fetch, the same page", () => {
  test("every needle, sort, direction, cursor and page reads the page the fetch reads, through whichever path its count picks; each path is taken", async () => {
    const counts = Object.fromEntries(await Promise.all(Object.keys(NEEDLES).map(async (needle) => [needle, await countContacts(h.rt.db, { fullName: needle })] as const)));
    expect(counts).toEqual({ Halfway: 135, Seventh: 39, Ninthly: 30, Rarely: 6, Oldtimer: 30, Newcomer: 30, hl: 30, dt: 30 });
    const paths = new Set<string>();
    for (const fullName of Object.keys(NEEDLES)) {
      for (const sortBy of CONTACT_SORTS) {
        for (const direction of ["asc", "desc"] as const) {
          for (const [cursorName, cursorOf] of Object.entries(CURSORS)) {
            for (const [limit, offset] of PAGES) {
              const page = { sortBy, direction, cursor: cursorOf(sortBy), limit, offset };
              // counted as 1, its window would be every entry, over 8 times the matches: fetched
              const fetched = await listContacts(h.rt.db, { fullName }, { ...page, matches: 1 });
              const { db, captured } = capturing(h.rt.db);
              const planned = await listContacts(db, { fullName }, { ...page, matches: counts[fullName]! });
              const path = pathOf(captured.map((c) => c.sql));
              paths.add(`${fullName} ${path}`);
              const label = { fullName, sortBy, direction, cursorName, limit, offset, path };
              expect({ ...label, ids: planned.map((row) => row.id) }).toEqual({ ...label, ids: fetched.map((row) => row.id) });
            }
          }
        }
      }
    }
    // the broad needles fill their pages from a window; the rare one's window would exceed 8 times its
    // matches; those crowding one end of the order miss in a window read from the other end
    for (const taken of ["Halfway window", "Ninthly window", "Rarely fetched", "Oldtimer window", "Oldtimer window, then fetched", "Newcomer window, then fetched", "hl window", "dt window, then fetched"]) {
      expect({ taken, seen: paths.has(taken) }).toEqual({ taken, seen: true });
    }
  });

  test("a needle under 1 in 8 reads a window for its first pages, and fetches once the window would exceed 8 times its matches", async () => {
    const paths: Record<string, string> = {};
    for (const [limit, offset] of [[5, 0], [5, 15], [10, 40]] as const) {
      const { db, captured } = capturing(h.rt.db);
      await listContacts(db, { fullName: "Ninthly" }, { sortBy: "created_at", direction: "desc", cursor: null, limit, offset, matches: 30 });
      paths[`${limit} after ${offset}`] = pathOf(captured.map((c) => c.sql));
    }
    // windows of 2 * (offset + limit) * 270 / 30 entries against 8 * 30 = 240: 90, 360 (at most 271), 900 (271)
    expect(paths).toEqual({ "5 after 0": "window", "5 after 15": "fetched", "10 after 40": "fetched" });
  });

  test("matches crowding the far end of the order: newest first the window holds none of them and the page is fetched after it; oldest first the window fills the page", async () => {
    const page = { sortBy: "created_at" as const, cursor: null, limit: 5, offset: 0, matches: 30 };
    const newest = capturing(h.rt.db);
    const found = await listContacts(newest.db, { fullName: "Oldtimer" }, { ...page, direction: "desc" });
    expect(newest.captured.map((c) => c.sql.slice(0, 40))).toEqual([
      "SELECT n FROM row_counts WHERE table_nam",
      "SELECT min(w.rid) AS lo, max(w.rid) AS h",
      "SELECT c.id, c.first_name, c.last_name, ",
      "SELECT count(*) AS n FROM (SELECT c.rowi",
      "SELECT c.id, c.first_name, c.last_name, ",
    ]);
    // the window of 2 * 5 * 270 / 30 = 90 newest entries was read to its end
    expect(newest.captured[3]!.params).toEqual([90]);
    const oldest = capturing(h.rt.db);
    const first = await listContacts(oldest.db, { fullName: "Oldtimer" }, { ...page, direction: "asc" });
    expect(pathOf(oldest.captured.map((c) => c.sql))).toBe("window");
    const fetched = (direction: "asc" | "desc") => listContacts(h.rt.db, { fullName: "Oldtimer" }, { ...page, direction, matches: 1 });
    expect({ newest: found, oldest: first }).toEqual({ newest: await fetched("desc"), oldest: await fetched("asc") });
    expect([...found, ...first].every((row) => row.last_name!.includes("Oldtimer"))).toBe(true);
  });

  test("in the created_at order a window collects its needle's matches between its entries' lowest and highest rowid only, and reads the fetch's page when rowids do not follow creation", async () => {
    const page = { sortBy: "created_at" as const, direction: "desc" as const, cursor: null, limit: 5, offset: 5, matches: 135 };
    const { db, captured } = capturing(h.rt.db);
    const planned = await listContacts(db, { fullName: "Halfway" }, page);
    // a window of 2 * 10 * 270 / 135 = 40 entries: the newest 40 contacts, rowids 231 to 270
    const window = await h.rt.db.get<{ lo: number; hi: number }>("SELECT min(rowid) AS lo, max(rowid) AS hi FROM (SELECT rowid FROM contacts ORDER BY created_at DESC, id DESC LIMIT 40)");
    expect(window).toEqual({ lo: 231, hi: 270 });
    const read = captured.find((c) => c.sql.startsWith("SELECT c.id"))!;
    expect({ bounded: read.sql.includes("MATCH ? AND f.rowid BETWEEN ? AND ?"), params: read.params.slice(0, 5) }).toEqual({ bounded: true, params: [40, '"Halfway"', 231, 270, 5] });
    expect(planned.map((row) => row.id)).toEqual((await listContacts(h.rt.db, { fullName: "Halfway" }, { ...page, matches: 1 })).map((row) => row.id));
    // The oldest and newest 20 contacts trade creation times: each window's rowids reach far beyond its entries' times.
    const ends = await h.rt.db.all<{ id: string; created_at: number }>("SELECT id, created_at FROM contacts WHERE rowid <= 20 OR rowid > 250 ORDER BY rowid");
    await h.rt.db.write(async (tx) => {
      for (let i = 0; i < 20; i++) {
        await tx.run("UPDATE contacts SET created_at = ? WHERE id = ?", [ends[39 - i]!.created_at, ends[i]!.id]);
        await tx.run("UPDATE contacts SET created_at = ? WHERE id = ?", [ends[i]!.created_at, ends[39 - i]!.id]);
      }
    });
    for (const fullName of ["Halfway", "Seventh", "Ninthly", "Oldtimer", "Newcomer"]) {
      const matches = await countContacts(h.rt.db, { fullName });
      for (const direction of ["asc", "desc"] as const) {
        for (const [limit, offset] of PAGES) {
          const reordered = { ...page, direction, limit, offset };
          const label = { fullName, direction, limit, offset };
          const ids = async (counted: number) => (await listContacts(h.rt.db, { fullName }, { ...reordered, matches: counted })).map((row) => row.id);
          expect({ ...label, ids: await ids(matches) }).toEqual({ ...label, ids: await ids(1) });
        }
      }
    }
  });
});
