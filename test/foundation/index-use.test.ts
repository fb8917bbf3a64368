import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { listAccountsPage } from "../../server/accounts/service.ts";
import { CONTACT_SORTS } from "../../server/contacts/model.ts";
import { listContactsPage } from "../../server/contacts/service.ts";
import { countContacts, listContacts, type ContactFilters } from "../../server/contacts/store.ts";
import type { CursorPosition } from "../../server/http/list-query.ts";
import { listDeletedPage } from "../../server/tombstones/service.ts";
import { countTombstonesSince, listTombstonesSince } from "../../server/tombstones/store.ts";
import { createUser, listUsersPage } from "../../server/users/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing, queryPlan, type Captured } from "../support/query-plans.ts";

let h: Harness;
let acme: string;
let globex: string;
let user: string;
let rareUser: string;
let oldAccount: string;
beforeAll(async () => {
  h = await createHarness();
  acme = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme", domain: "acme.test" } })).body.data.id;
  globex = (await h.json("POST", "/public/v1/accounts", { body: { name: "Globex" } })).body.data.id;
  oldAccount = (await h.json("POST", "/public/v1/accounts", { body: { name: "Initech" } })).body.data.id;
  user = (await createUser(h.rt.db, { name: "U", email: "u@example.com" })).id;
  rareUser = (await createUser(h.rt.db, { name: "R", email: "r@example.com" })).id;
  for (let i = 0; i < 40; i++) {
    // broad: tag "common", account Acme, user U (half the contacts); narrow: tag "rare", Globex, user R (one)
    // "old" and Initech: only the six oldest contacts, the far end of a newest-first walk
    const relations = { tags: [...(i % 2 ? ["common"] : []), ...(i === 7 ? ["rare"] : []), ...(i < 6 ? ["old"] : [])], account_ids: [...(i % 2 ? [acme] : []), ...(i === 7 ? [globex] : []), ...(i < 6 ? [oldAccount] : [])], assigned_user_id: i % 2 ? user : i === 8 ? rareUser : null };
    await h.json("POST", "/public/v1/contacts", { body: { first_name: i % 5 ? `First${i}` : null, last_name: `Last${i % 7}`, email: i % 3 ? `p${i}@example.com` : null, ...relations } });
  }
  await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ödön", last_name: "Straße" } });
});
afterAll(async () => await h.close());

const planOf = (c: Captured): string[] => queryPlan(h.db.sqlite, c);

/** expectIndexed fails on any full scan of a table that does not go through an index. */
function expectIndexed(label: string, plan: string[]) {
  const fullScans = plan.filter((line) => /^SCAN (c|contacts|accounts|users|contact_tags|contact_accounts|ca|ct|tombstones)\b(?! USING)/.test(line));
  expect({ label, plan, fullScans }).toEqual({ label, plan, fullScans: [] });
}

const INDEX_OF: Record<string, string> = { created_at: "contacts_created", updated_at: "contacts_updated", first_name: "contacts_first_name", last_name: "contacts_last_name", email: "contacts_email" };

/** TAG_INDEX_OF names the index of contact_tags (tag, sort key, contact_id) that walks a tag's contacts in each sort. */
const TAG_INDEX_OF: Record<string, string> = { created_at: "contact_tags_created", updated_at: "contact_tags_updated", first_name: "contact_tags_first_name", last_name: "contact_tags_last_name", email: "contact_tags_email" };

const FILTERS: Record<string, () => ContactFilters> = {
  none: () => ({}),
  email: () => ({ email: "p1@example.com" }),
  "full_name, broad (sort index walked)": () => ({ fullName: "irst1" }),
  "full_name, narrow (matches fetched by rowid)": () => ({ fullName: "irst12" }),
  created_after: () => ({ createdAfter: 0 }),
  updated_after: () => ({ updatedAfter: 0 }),
  "email and created_after": () => ({ email: "p1@example.com", createdAfter: 0 }),
  "tag, broad (the tag's sort index walked)": () => ({ tags: ["common"] }),
  "tag, narrow (matches fetched)": () => ({ tags: ["rare"] }),
  "tag of the oldest contacts (the tag's sort index walked)": () => ({ tags: ["old"] }),
  "two tags": () => ({ tags: ["common", "rare"] }),
  "account_id, broad": () => ({ accountId: acme }),
  "account_id, narrow": () => ({ accountId: globex }),
  "assigned_user_id, broad": () => ({ assignedUserId: user }),
  "assigned_user_id, narrow": () => ({ assignedUserId: rareUser }),
  "tag, account_id, assigned_user_id and updated_after together": () => ({ tags: ["common"], accountId: acme, assignedUserId: user, updatedAfter: 0 }),
};

const WINDOW_COUNT = "SELECT count(*) AS n FROM (SELECT c.rowid AS rid";
/** TAG_WINDOW is how a page walking a tag's own sort index reads it. */
const TAG_WINDOW = "FROM contact_tags t WHERE t.tag = ?";

/** RELATION_INDEX is the index (or primary key) each relation filter must be read through, fetched or walked. */
const RELATION_INDEX = {
  tags: /contact_tags_(created|updated|first_name|last_name|email) \(tag=\?|ct (EXISTS )?USING PRIMARY KEY \(contact_id=\? AND tag=\?\)/,
  accountId: /contact_accounts_account \(account_id=\?|ca (EXISTS )?USING PRIMARY KEY \(contact_id=\? AND account_id=\?\)/,
  // walked: the sort index is read in order and each row's own column is checked
  assignedUserId: /contacts_assigned_user \(assigned_user_id=\?|(SCAN|SEARCH) c USING INDEX contacts_(created|updated|first_name|last_name|email)\b/,
};

const CURSORS: Record<string, (sort: string) => CursorPosition | null> = {
  "no cursor": () => null,
  "cursor on a value": (sort) => ({ value: sort.endsWith("_at") ? 1_700_000_000_000 : "m", id: "con_01M00000000000000000000000" }),
  "cursor on NULL": () => ({ value: null, id: "con_01M00000000000000000000000" }),
};

describe("index use: every documented filter and sort", () => {
  for (const [filterName, filtersOf] of Object.entries(FILTERS)) {
    test(`filter ${filterName}: list and count use indexes in every sort, direction and cursor position`, async () => {
      const filters = filtersOf();
      for (const sortBy of CONTACT_SORTS) {
        for (const direction of ["asc", "desc"] as const) {
          for (const [cursorName, cursor] of Object.entries(CURSORS)) {
            const { db, captured } = capturing(h.rt.db);
            // a page size larger than the data makes the store also read the group after the cursor
            await listContacts(db, filters, { sortBy, direction, cursor: cursor(sortBy), limit: 100, offset: 0, matches: await countContacts(h.rt.db, filters) });
            await countContacts(db, filters);
            expect(captured.length).toBeGreaterThan(0);
            for (const c of captured) {
              const plan = planOf(c);
              const label = `${filterName} / ${sortBy} ${direction} / ${cursorName}: ${c.sql}`;
              expectIndexed(label, plan);
              if (filters.email) expect({ label, plan: plan.join(" | ") }).toEqual({ label, plan: expect.stringMatching(/contacts_email(_created)? \(email=\?/) });
              // the contact total that decides a name search's plan is one primary-key lookup, checked above
              if (filters.fullName && !c.sql.includes("FROM row_counts")) expect({ label, plan: plan.join(" | ") }).toEqual({ label, plan: expect.stringMatching(/SCAN f VIRTUAL TABLE INDEX \d+:M/) });
              // a single relation filter counts from the trigger-kept totals; lists and combined counts read the relation
              // (and a walk's check of how far its window reached reads the sort index alone)
              const counted = c.sql.includes("FROM contact_filter_counts") || c.sql.includes("FROM row_counts") || c.sql.startsWith(WINDOW_COUNT);
              for (const key of ["tags", "accountId", "assignedUserId"] as const) {
                // beside another relation, the assigned user is a check on each row that relation fetched
                if (key === "assignedUserId" && (filters.tags || filters.accountId)) continue;
                if (filters[key] !== undefined && !counted) expect({ label, plan: plan.join(" | ") }).toEqual({ label, plan: expect.stringMatching(RELATION_INDEX[key]) });
              }
              // a walk of a tag reads its index of the page's sort in order (the cursor a range of it): only the page's rows are sorted
              if (c.sql.includes(TAG_WINDOW)) {
                expect({ label, plan: plan.join(" | ") }).toEqual({ label, plan: expect.stringContaining(`SEARCH t USING COVERING INDEX ${TAG_INDEX_OF[sortBy]} (tag=?`) });
                expect({ label, sorts: plan.filter((line) => line.includes("TEMP B-TREE")).length }).toEqual({ label, sorts: c.sql.startsWith("SELECT count(*)") ? 0 : 1 });
              }
            }
          }
        }
      }
    });
  }

  test("keyset pages without filters are one range of the sort index: no sort, no scan", async () => {
    for (const sortBy of CONTACT_SORTS) {
      for (const direction of ["asc", "desc"] as const) {
        const { db, captured } = capturing(h.rt.db);
        await listContacts(db, {}, { sortBy, direction, cursor: CURSORS["cursor on a value"]!(sortBy), limit: 100, offset: 0, matches: 40 });
        for (const c of captured) {
          const plan = planOf(c);
          expect({ sortBy, direction, plan }).toEqual({ sortBy, direction, plan: [expect.stringMatching(new RegExp(`^SEARCH c USING (COVERING )?INDEX ${INDEX_OF[sortBy]} `))] });
        }
        const first = captured[0]!;
        expect(planOf(first)[0]).toContain(`((${sortBy},id)${direction === "asc" ? ">" : "<"}(?,?))`);
      }
    }
  });

  test("an email page in the default order is one range of contacts_email_created: no sort step", async () => {
    for (const direction of ["asc", "desc"] as const) {
      // created_at is never NULL, so neither is a cursor in this order
      for (const cursorName of ["no cursor", "cursor on a value"]) {
        const cursor = CURSORS[cursorName]!;
        const { db, captured } = capturing(h.rt.db);
        await listContacts(db, { email: "p1@example.com" }, { sortBy: "created_at", direction, cursor: cursor("created_at"), limit: 25, offset: 0, matches: 1 });
        for (const c of captured) {
          expect({ direction, cursorName, plan: planOf(c) }).toEqual({ direction, cursorName, plan: [expect.stringMatching(/^SEARCH c USING INDEX contacts_email_created \(email=\?/)] });
        }
      }
    }
  });

  test("an incremental sync (updated_after, sorted by updated_at, by cursor) seeks the cursor in contacts_updated", async () => {
    for (const direction of ["asc", "desc"] as const) {
      const { db, captured } = capturing(h.rt.db);
      await listContacts(db, { updatedAfter: 0 }, { sortBy: "updated_at", direction, cursor: { value: 1_700_000_000_000, id: "con_x" }, limit: 10, offset: 0, matches: 40 });
      const plan = planOf(captured[0]!);
      expect(plan).toEqual([expect.stringMatching(/^SEARCH c USING INDEX contacts_updated \(.*\(updated_at,id\)[<>]\(\?,\?\)/)]);
    }
  });

  test("a timestamp filter on another column than the sort drives through its own index", async () => {
    const { db, captured } = capturing(h.rt.db);
    await listContacts(db, { createdAfter: 0 }, { sortBy: "email", direction: "asc", cursor: { value: "m", id: "con_x" }, limit: 10, offset: 0, matches: 40 });
    expect(planOf(captured[0]!)).toEqual(["SEARCH c USING INDEX contacts_created (created_at>?)", "USE TEMP B-TREE FOR ORDER BY"]);
  });

  test("a name search matching 1 in 8 contacts or more walks the sort index; a narrower one fetches its matches and sorts them", async () => {
    const broad = { fullName: "irst1" };
    const narrow = { fullName: "irst12" };
    expect([await countContacts(h.rt.db, broad), await countContacts(h.rt.db, narrow)]).toEqual([9, 1]);
    const planFor = async (filters: ContactFilters) => {
      const { db, captured } = capturing(h.rt.db);
      await listContacts(db, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 25, offset: 0, matches: await countContacts(h.rt.db, filters) });
      return planOf(captured.at(-1)!).join(" | ");
    };
    expect(await planFor(broad)).toStartWith("SCAN c USING INDEX contacts_created | LIST SUBQUERY");
    expect(await planFor(broad)).not.toContain("TEMP B-TREE");
    expect(await planFor(narrow)).toStartWith("SEARCH c USING INTEGER PRIMARY KEY (rowid=?) | LIST SUBQUERY");
    expect(await planFor(narrow)).toContain("USE TEMP B-TREE FOR ORDER BY");
  });

  test("a broad needle too short for trigrams walks the sort index and looks up each row's name, stopping at a full page", async () => {
    const { db, captured } = capturing(h.rt.db);
    await listContacts(db, { fullName: "a" }, { sortBy: "created_at", direction: "desc", cursor: null, limit: 25, offset: 0, matches: await countContacts(h.rt.db, { fullName: "a" }) });
    expect(planOf(captured.at(-1)!)).toEqual(["SCAN c USING INDEX contacts_created", "CORRELATED SCALAR SUBQUERY 1", "SCAN f VIRTUAL TABLE INDEX 0:="]);
  });

  test("both plans of a name search return the same rows for every needle kind, sort, direction, cursor and page", async () => {
    // a trigram match, an ASCII needle too short for trigrams (LIKE), one beyond ASCII (each spelling)
    for (const fullName of ["irst1", "a", "t3", "öd"]) {
      for (const sortBy of CONTACT_SORTS) {
        for (const direction of ["asc", "desc"] as const) {
          for (const cursor of Object.values(CURSORS)) {
            for (const [limit, offset] of [[4, 0], [4, 4], [100, 0]] as const) {
              const page = { sortBy, direction, cursor: cursor(sortBy), limit, offset };
              const fetched = await listContacts(h.rt.db, { fullName }, { ...page, matches: 0 });
              const walked = await listContacts(h.rt.db, { fullName }, { ...page, matches: 40 });
              expect({ fullName, sortBy, direction, page, ids: walked.map((r) => r.id) }).toEqual({ fullName, sortBy, direction, page, ids: fetched.map((r) => r.id) });
            }
          }
        }
      }
    }
    expect(await Promise.all(["irst1", "a", "t3", "öd"].map(async (fullName) => (await countContacts(h.rt.db, { fullName })) > 0))).toEqual([true, true, true, true]);
  });

  /** TAG_WALKED is the plan of a page walking a tag's (tag, created_at, contact_id) index newest first: only the window's rows are sorted. */
  const TAG_WALKED = ["SEARCH c USING INDEX sqlite_autoindex_contacts_1 (id=?)", expect.stringMatching(/^LIST SUBQUERY \d+$/), "SEARCH t USING COVERING INDEX contact_tags_created (tag=?)", "USE TEMP B-TREE FOR ORDER BY"];
  /** TAG_FETCHED is the plan of a page fetching all of a tag's contacts (any of its covering indexes) and sorting them. */
  const TAG_FETCHED = ["SEARCH c USING INDEX sqlite_autoindex_contacts_1 (id=?)", "LIST SUBQUERY 1", expect.stringMatching(/^SEARCH contact_tags USING COVERING INDEX contact_tags_\w+ \(tag=\?\)$/), "USE TEMP B-TREE FOR ORDER BY"];

  test("a relation filter matching 1 in 8 contacts or more walks a sort index, a tag its own and the others contacts' probing the relation's key; a narrower one fetches its matches from the relation's index and sorts them", async () => {
    const planFor = async (filters: ContactFilters) => {
      const { db, captured } = capturing(h.rt.db);
      await listContacts(db, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 25, offset: 0, matches: await countContacts(h.rt.db, filters) });
      return planOf(captured.find((c) => c.sql.startsWith("SELECT c.id"))!);
    };
    expect([await countContacts(h.rt.db, { tags: ["common"] }), await countContacts(h.rt.db, { tags: ["rare"] }), await countContacts(h.rt.db, { accountId: acme }), await countContacts(h.rt.db, { accountId: globex })]).toEqual([20, 1, 20, 1]);
    expect([await countContacts(h.rt.db, { assignedUserId: user }), await countContacts(h.rt.db, { assignedUserId: rareUser }), await countContacts(h.rt.db, { tags: ["common", "rare"] })]).toEqual([20, 1, 1]);
    const walked = (probe: string) => ["SEARCH c USING INTEGER PRIMARY KEY (rowid=?)", expect.stringMatching(/^LIST SUBQUERY \d+$/), "CO-ROUTINE w", expect.stringMatching(/^SCAN c USING (COVERING )?INDEX contacts_created$/), "SCAN w", ...(probe ? [probe] : []), "USE TEMP B-TREE FOR ORDER BY"];
    expect((await planFor({ tags: ["common"] }))).toEqual(TAG_WALKED);
    expect((await planFor({ tags: ["rare"] }))).toEqual(TAG_FETCHED);
    expect((await planFor({ accountId: acme }))).toEqual(walked("SEARCH ca EXISTS USING COVERING INDEX contact_accounts_account (account_id=? AND contact_id=?)"));
    expect((await planFor({ accountId: globex }))).toEqual(["SEARCH c USING INDEX sqlite_autoindex_contacts_1 (id=?)", "LIST SUBQUERY 1", "SEARCH contact_accounts USING COVERING INDEX contact_accounts_account (account_id=?)", "USE TEMP B-TREE FOR ORDER BY"]);
    expect((await planFor({ assignedUserId: user }))).toEqual(walked(""));
    expect((await planFor({ assignedUserId: rareUser }))).toEqual(["SEARCH c USING INDEX contacts_assigned_user (assigned_user_id=?)", "USE TEMP B-TREE FOR ORDER BY"]);
    // beside a tag, the other relations are probed on the tag's rows in the window, the assigned user on the contacts read from it
    expect((await planFor({ tags: ["common"], accountId: acme, assignedUserId: user }))).toEqual([
      "SEARCH c USING INDEX sqlite_autoindex_contacts_1 (id=?)",
      expect.stringMatching(/^LIST SUBQUERY \d+$/),
      expect.stringMatching(/^CO-ROUTINE w$/),
      "SEARCH t USING COVERING INDEX contact_tags_created (tag=?)",
      "SCAN w",
      "SEARCH ca EXISTS USING COVERING INDEX contact_accounts_account (account_id=? AND contact_id=?)",
      "USE TEMP B-TREE FOR ORDER BY",
    ]);
  });

  test("a tag carried only by the oldest contacts, listed newest first, is read from the newest of them in its own sort index: a window that cannot miss, no fetch", async () => {
    const filters = { tags: ["old"] };
    const { db, captured } = capturing(h.rt.db);
    const rows = await listContacts(db, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 2, offset: 0, matches: await countContacts(h.rt.db, filters) });
    expect(captured.map((c) => c.sql.slice(0, 40))).toEqual([expect.stringMatching(/^SELECT n FROM row_counts/), expect.stringMatching(/^SELECT n FROM contact_filter_counts/), expect.stringMatching(/^SELECT c.id/)]);
    expect(planOf(captured.at(-1)!)).toEqual(TAG_WALKED);
    const fetched = await listContacts(h.rt.db, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 2, offset: 0, matches: 0 });
    expect(rows.map((r) => r.id)).toEqual(fetched.map((r) => r.id));
    expect(rows).toHaveLength(2);
  });

  test("a walk of contacts' sort index reads a bounded window; when the matches lie beyond it (an account of only the oldest contacts, newest first), the page is fetched instead", async () => {
    const filters = { accountId: oldAccount };
    const { db, captured } = capturing(h.rt.db);
    const rows = await listContacts(db, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 2, offset: 0, matches: await countContacts(h.rt.db, filters) });
    expect(captured.map((c) => c.sql.slice(0, 40))).toEqual([
      expect.stringMatching(/^SELECT n FROM row_counts/),
      expect.stringMatching(/^SELECT n FROM contact_filter_counts/),
      expect.stringMatching(/^SELECT c.id/),
      WINDOW_COUNT.slice(0, 40),
      expect.stringMatching(/^SELECT n FROM contact_filter_counts/),
      expect.stringMatching(/^SELECT c.id/),
    ]);
    // the window (2 * 2 * 41 / 6 = 28 newest rows) held none of them; the fetch found the newest two
    expect(planOf(captured.at(-1)!)).toEqual(["SEARCH c USING INDEX sqlite_autoindex_contacts_1 (id=?)", "LIST SUBQUERY 1", "SEARCH contact_accounts USING COVERING INDEX contact_accounts_account (account_id=?)", "USE TEMP B-TREE FOR ORDER BY"]);
    const fetched = await listContacts(h.rt.db, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 2, offset: 0, matches: 0 });
    expect(rows.map((r) => r.id)).toEqual(fetched.map((r) => r.id));
    expect(rows).toHaveLength(2);
  });

  test("at a million contacts (counts set so), a relation walks when a spread walk reads fewer rows than fetching: an account of 10,000 walks, of 500 fetches; a tag's walk reads only its own rows", async () => {
    const db = h.rt.db;
    const pagePlan = async (filters: ContactFilters, matches: number) => {
      const { db: spy, captured } = capturing(db);
      await listContacts(spy, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 25, offset: 0, matches });
      return planOf(captured.find((c) => c.sql.startsWith("SELECT c.id"))!);
    };
    const saved = (await db.get<{ n: number }>("SELECT n FROM row_counts WHERE table_name = 'contacts'"))!.n;
    const setCount = (filter: string, value: string, n: number) => db.run("UPDATE contact_filter_counts SET n = ? WHERE filter = ? AND value = ?", [n, filter, value]);
    try {
      await db.run("UPDATE row_counts SET n = 1000000 WHERE table_name = 'contacts'");
      await setCount("tag", "common", 10000);
      await setCount("tag", "rare", 500);
      await setCount("account", acme, 10000);
      await setCount("account", globex, 500);
      // 25 * 1,000,000 / 10,000 = 2,500 rows to walk, against 10,000 contacts to fetch
      expect((await pagePlan({ accountId: acme }, 10000))[0]).toBe("SEARCH c USING INTEGER PRIMARY KEY (rowid=?)");
      // 25 * 1,000,000 / 500 = 50,000 rows to walk, against 500 to fetch
      expect((await pagePlan({ accountId: globex }, 500))).toEqual(["SEARCH c USING INDEX sqlite_autoindex_contacts_1 (id=?)", "LIST SUBQUERY 1", "SEARCH contact_accounts USING COVERING INDEX contact_accounts_account (account_id=?)", "USE TEMP B-TREE FOR ORDER BY"]);
      // every row of a tag's index is a match: 25 rows to walk, against 500 to fetch
      expect((await pagePlan({ tags: ["rare"] }, 500))).toEqual(TAG_WALKED);
      // both tags, 400 matches: 25 * 500 / 400 = 32 rows of the rarer tag to walk, against its 500 to fetch
      expect((await pagePlan({ tags: ["common", "rare"] }, 400)).join(" | ")).toContain("SEARCH t USING COVERING INDEX contact_tags_created (tag=?)");
      // a tag of 10,000 and an account of 500 sharing 10: 25,000 of the tag's rows to walk, against the account's 500 to fetch
      expect((await pagePlan({ tags: ["common"], accountId: globex }, 10))).toEqual(["SEARCH c USING INDEX sqlite_autoindex_contacts_1 (id=?)", expect.stringMatching(/^LIST SUBQUERY \d+$/), "SEARCH contact_accounts USING COVERING INDEX contact_accounts_account (account_id=?)", expect.stringMatching(/^CORRELATED SCALAR SUBQUERY \d+$/), "SEARCH ct USING PRIMARY KEY (contact_id=? AND tag=?)", "USE TEMP B-TREE FOR ORDER BY"]);
    } finally {
      await db.run("UPDATE row_counts SET n = ? WHERE table_name = 'contacts'", [saved]);
      await setCount("tag", "common", 20);
      await setCount("tag", "rare", 1);
      await setCount("account", acme, 20);
      await setCount("account", globex, 1);
    }
  });

  test("several relation filters fetch the matches of the one with the fewest contacts and probe the others' keys; their count reads only the relation tables", async () => {
    const listed = "SELECT c.id";
    for (const [filters, list, count, driverValue] of [
      [{ tags: ["common", "rare"] }, "EXISTS (SELECT 1 FROM contact_tags ct WHERE ct.contact_id = c.id AND ct.tag = ?) AND c.id IN (SELECT contact_id FROM contact_tags WHERE tag = ?)", "FROM contact_tags d WHERE d.tag = ? AND EXISTS (SELECT 1 FROM contact_tags ct", "rare"],
      [{ tags: ["rare", "common"] }, "WHERE c.id IN (SELECT contact_id FROM contact_tags WHERE tag = ?)", "FROM contact_tags d WHERE d.tag = ? AND EXISTS (SELECT 1 FROM contact_tags ct", "rare"],
      [{ tags: ["common"], accountId: globex }, "c.id IN (SELECT contact_id FROM contact_accounts WHERE account_id = ?)", "FROM contact_accounts d WHERE d.account_id = ? AND EXISTS (SELECT 1 FROM contact_tags ct", globex],
      [{ accountId: acme, assignedUserId: rareUser }, "AND c.assigned_user_id = ?", "FROM contacts d WHERE d.assigned_user_id = ? AND EXISTS (SELECT 1 FROM contact_accounts ca", rareUser],
    ] as [ContactFilters, string, string, string][]) {
      const { db, captured } = capturing(h.rt.db);
      await listContacts(db, filters, { sortBy: "last_name", direction: "asc", cursor: null, limit: 25, offset: 0, matches: await countContacts(h.rt.db, filters) });
      await countContacts(db, filters);
      const pages = captured.filter((c) => c.sql.startsWith(listed));
      const counts = captured.filter((c) => c.sql.startsWith("SELECT count(*)"));
      expect({ filters, pages: pages.map((c) => c.sql.includes(list)), counts: counts.map((c) => [c.sql.includes(count), c.params[0]]) }).toEqual({ filters, pages: [true], counts: [[true, driverValue]] });
      for (const c of [...pages, ...counts]) {
        expect({ filters, plan: planOf(c).join(" | ") }).toEqual({ filters, plan: expect.not.stringMatching(/LIST SUBQUERY \d+ \| .*LIST SUBQUERY/) });
        expectIndexed(c.sql, planOf(c));
      }
    }
    // two tags count from the rarer tag's rows, probing the other's narrow (tag, created_at, contact_id) index
    const { db, captured } = capturing(h.rt.db);
    await countContacts(db, { tags: ["common", "rare"] });
    expect(planOf(captured.at(-1)!)).toEqual(["SEARCH d USING COVERING INDEX contact_tags_created (tag=?)", "SEARCH ct EXISTS USING COVERING INDEX contact_tags_created (tag=? AND created_at=? AND contact_id=?)"]);
  });

  test("both plans of a relation filter return the same rows for every sort, direction, cursor and page", async () => {
    const single = [{ tags: ["common"] }, { tags: ["rare"] }, { tags: ["old"] }, { accountId: acme }, { accountId: globex }, { accountId: oldAccount }, { assignedUserId: user }, { assignedUserId: rareUser }];
    const combined = [{ tags: ["common", "rare"] }, { tags: ["common"], accountId: acme }, { accountId: acme, assignedUserId: user }, { tags: ["common"], accountId: acme, assignedUserId: user }];
    for (const filters of [...single, ...combined] as ContactFilters[]) {
      for (const sortBy of CONTACT_SORTS) {
        for (const direction of ["asc", "desc"] as const) {
          for (const cursor of Object.values(CURSORS)) {
            for (const [limit, offset] of [[4, 0], [4, 4], [100, 0]] as const) {
              const page = { sortBy, direction, cursor: cursor(sortBy), limit, offset };
              const fetched = await listContacts(h.rt.db, filters, { ...page, matches: 0 });
              const walked = await listContacts(h.rt.db, filters, { ...page, matches: 40 });
              expect({ filters, sortBy, direction, page, ids: walked.map((r) => r.id) }).toEqual({ filters, sortBy, direction, page, ids: fetched.map((r) => r.id) });
            }
          }
        }
      }
    }
  });

  test("full_name needles too short for trigrams, or with % or _, still never scan contacts", async () => {
    for (const fullName of ["a", "ab", "50%", "a_b"]) {
      const { db, captured } = capturing(h.rt.db);
      await listContacts(db, { fullName }, { sortBy: "created_at", direction: "desc", cursor: null, limit: 10, offset: 0, matches: await countContacts(h.rt.db, { fullName }) });
      await countContacts(db, { fullName });
      for (const c of captured) expectIndexed(fullName, planOf(c));
    }
  });

  test("the whole list path, accounts by name and domain, and users use indexes", async () => {
    const { db, captured } = capturing(h.rt.db);
    await listContactsPage(db, { email: "P1@example.com", include: "accounts,assigned_user,assigned_users" });
    await listContactsPage(db, { per_page: "5", sort_by: "last_name" });
    await listAccountsPage(db, { name: "acme" });
    await listAccountsPage(db, { domain: "ACME.test" });
    await listUsersPage(db, {});
    const since = new Date(Date.now() - 86_400_000).toISOString();
    await listDeletedPage({ ...h.rt, db: { ...h.rt.db, all: db.all, get: db.get } }, "contact", { since });
    await listTombstonesSince(db, "account", 0, { cursor: { value: 1_700_000_000_000, id: "acc_x" }, limit: 10, offset: 0 });
    await countTombstonesSince(db, "account", 0);
    const plans = captured.map((c) => ({ sql: c.sql, plan: planOf(c) }));
    expect(plans.filter((p) => p.sql.includes("FROM tombstones")).map((p) => p.plan.join(" | "))).toEqual([
      expect.stringContaining("tombstones_deleted (resource=? AND deleted_at>?"),
      expect.stringContaining("tombstones_deleted (resource=? AND deleted_at>?"),
      expect.stringContaining("tombstones_deleted (resource=? AND deleted_at>?"),
      expect.stringContaining("tombstones_deleted (resource=? AND deleted_at>?"),
    ]);
    for (const { sql, plan } of plans) expectIndexed(sql, plan);
    expect(plans.filter((p) => p.sql.includes("FROM accounts") && p.sql.includes("name_key = ?")).map((p) => p.plan.join(" | "))).toEqual([
      expect.stringContaining("accounts_name_key (name_key=?)"),
      expect.stringContaining("accounts_name_key (name_key=?)"),
    ]);
    expect(plans.filter((p) => p.sql.includes("FROM accounts") && p.sql.includes("domain = ?")).map((p) => p.plan.join(" | "))).toEqual([
      expect.stringContaining("accounts_domain (domain=?)"),
      expect.stringContaining("accounts_domain (domain=?)"),
    ]);
  });
});
