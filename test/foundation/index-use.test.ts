import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { listAccountsPage } from "../../server/accounts/service.ts";
import { CONTACT_SORTS } from "../../server/contacts/model.ts";
import { listContactsPage } from "../../server/contacts/service.ts";
import { countContacts, listContacts, type ContactFilters } from "../../server/contacts/store.ts";
import type { CursorPosition } from "../../server/http/list-query.ts";
import { listUsersPage } from "../../server/users/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { capturing, queryPlan, type Captured } from "../support/query-plans.ts";

let h: Harness;
beforeAll(async () => {
  h = createHarness();
  for (let i = 0; i < 40; i++) {
    await h.json("POST", "/public/v1/contacts", { body: { first_name: i % 5 ? `First${i}` : null, last_name: `Last${i % 7}`, email: i % 3 ? `p${i}@example.com` : null } });
  }
  await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ödön", last_name: "Straße" } });
  await h.json("POST", "/public/v1/accounts", { body: { name: "Acme", domain: "acme.test" } });
});
afterAll(() => h.close());

const planOf = (c: Captured): string[] => queryPlan(h.rt.db, c);

/** expectIndexed fails on any full scan of a table that does not go through an index. */
function expectIndexed(label: string, plan: string[]) {
  const fullScans = plan.filter((line) => /^SCAN (c|contacts|accounts|users)\b(?! USING)/.test(line));
  expect({ label, plan, fullScans }).toEqual({ label, plan, fullScans: [] });
}

const INDEX_OF: Record<string, string> = { created_at: "contacts_created", updated_at: "contacts_updated", first_name: "contacts_first_name", last_name: "contacts_last_name", email: "contacts_email" };

const FILTERS: Record<string, ContactFilters> = {
  none: {},
  email: { email: "p1@example.com" },
  "full_name, broad (sort index walked)": { fullName: "irst1" },
  "full_name, narrow (matches fetched by rowid)": { fullName: "irst12" },
  created_after: { createdAfter: 0 },
  updated_after: { updatedAfter: 0 },
  "email and created_after": { email: "p1@example.com", createdAfter: 0 },
};

const CURSORS: Record<string, (sort: string) => CursorPosition | null> = {
  "no cursor": () => null,
  "cursor on a value": (sort) => ({ value: sort.endsWith("_at") ? 1_700_000_000_000 : "m", id: "con_01M00000000000000000000000" }),
  "cursor on NULL": () => ({ value: null, id: "con_01M00000000000000000000000" }),
};

describe("index use: every documented filter and sort", () => {
  for (const [filterName, filters] of Object.entries(FILTERS)) {
    test(`filter ${filterName}: list and count use indexes in every sort, direction and cursor position`, () => {
      for (const sortBy of CONTACT_SORTS) {
        for (const direction of ["asc", "desc"] as const) {
          for (const [cursorName, cursor] of Object.entries(CURSORS)) {
            const { db, captured } = capturing(h.rt.db);
            // a page size larger than the data makes the store also read the group after the cursor
            listContacts(db, filters, { sortBy, direction, cursor: cursor(sortBy), limit: 100, offset: 0, matches: countContacts(h.rt.db, filters) });
            countContacts(db, filters);
            expect(captured.length).toBeGreaterThan(0);
            for (const c of captured) {
              const plan = planOf(c);
              const label = `${filterName} / ${sortBy} ${direction} / ${cursorName}: ${c.sql}`;
              expectIndexed(label, plan);
              if (filters.email) expect({ label, plan: plan.join(" | ") }).toEqual({ label, plan: expect.stringMatching(/contacts_email(_created)? \(email=\?/) });
              // the contact total that decides a name search's plan is one primary-key lookup, checked above
              if (filters.fullName && !c.sql.includes("FROM row_counts")) expect({ label, plan: plan.join(" | ") }).toEqual({ label, plan: expect.stringMatching(/SCAN f VIRTUAL TABLE INDEX \d+:M/) });
            }
          }
        }
      }
    });
  }

  test("keyset pages without filters are one range of the sort index: no sort, no scan", () => {
    for (const sortBy of CONTACT_SORTS) {
      for (const direction of ["asc", "desc"] as const) {
        const { db, captured } = capturing(h.rt.db);
        listContacts(db, {}, { sortBy, direction, cursor: CURSORS["cursor on a value"]!(sortBy), limit: 100, offset: 0, matches: 40 });
        for (const c of captured) {
          const plan = planOf(c);
          expect({ sortBy, direction, plan }).toEqual({ sortBy, direction, plan: [expect.stringMatching(new RegExp(`^SEARCH c USING (COVERING )?INDEX ${INDEX_OF[sortBy]} `))] });
        }
        const first = captured[0]!;
        expect(planOf(first)[0]).toContain(`((${sortBy},id)${direction === "asc" ? ">" : "<"}(?,?))`);
      }
    }
  });

  test("an email page in the default order is one range of contacts_email_created: no sort step", () => {
    for (const direction of ["asc", "desc"] as const) {
      // created_at is never NULL, so neither is a cursor in this order
      for (const cursorName of ["no cursor", "cursor on a value"]) {
        const cursor = CURSORS[cursorName]!;
        const { db, captured } = capturing(h.rt.db);
        listContacts(db, { email: "p1@example.com" }, { sortBy: "created_at", direction, cursor: cursor("created_at"), limit: 25, offset: 0, matches: 1 });
        for (const c of captured) {
          expect({ direction, cursorName, plan: planOf(c) }).toEqual({ direction, cursorName, plan: [expect.stringMatching(/^SEARCH c USING INDEX contacts_email_created \(email=\?/)] });
        }
      }
    }
  });

  test("an incremental sync (updated_after, sorted by updated_at, by cursor) seeks the cursor in contacts_updated", () => {
    for (const direction of ["asc", "desc"] as const) {
      const { db, captured } = capturing(h.rt.db);
      listContacts(db, { updatedAfter: 0 }, { sortBy: "updated_at", direction, cursor: { value: 1_700_000_000_000, id: "con_x" }, limit: 10, offset: 0, matches: 40 });
      const plan = planOf(captured[0]!);
      expect(plan).toEqual([expect.stringMatching(/^SEARCH c USING INDEX contacts_updated \(.*\(updated_at,id\)[<>]\(\?,\?\)/)]);
    }
  });

  test("a timestamp filter on another column than the sort drives through its own index", () => {
    const { db, captured } = capturing(h.rt.db);
    listContacts(db, { createdAfter: 0 }, { sortBy: "email", direction: "asc", cursor: { value: "m", id: "con_x" }, limit: 10, offset: 0, matches: 40 });
    expect(planOf(captured[0]!)).toEqual(["SEARCH c USING INDEX contacts_created (created_at>?)", "USE TEMP B-TREE FOR ORDER BY"]);
  });

  test("a name search matching 1 in 8 contacts or more walks the sort index; a narrower one fetches its matches and sorts them", () => {
    const broad = { fullName: "irst1" };
    const narrow = { fullName: "irst12" };
    expect([countContacts(h.rt.db, broad), countContacts(h.rt.db, narrow)]).toEqual([9, 1]);
    const planFor = (filters: ContactFilters) => {
      const { db, captured } = capturing(h.rt.db);
      listContacts(db, filters, { sortBy: "created_at", direction: "desc", cursor: null, limit: 25, offset: 0, matches: countContacts(h.rt.db, filters) });
      return planOf(captured.at(-1)!).join(" | ");
    };
    expect(planFor(broad)).toStartWith("SCAN c USING INDEX contacts_created | LIST SUBQUERY");
    expect(planFor(broad)).not.toContain("TEMP B-TREE");
    expect(planFor(narrow)).toStartWith("SEARCH c USING INTEGER PRIMARY KEY (rowid=?) | LIST SUBQUERY");
    expect(planFor(narrow)).toContain("USE TEMP B-TREE FOR ORDER BY");
  });

  test("a broad needle too short for trigrams walks the sort index and looks up each row's name, stopping at a full page", () => {
    const { db, captured } = capturing(h.rt.db);
    listContacts(db, { fullName: "a" }, { sortBy: "created_at", direction: "desc", cursor: null, limit: 25, offset: 0, matches: countContacts(h.rt.db, { fullName: "a" }) });
    expect(planOf(captured.at(-1)!)).toEqual(["SCAN c USING INDEX contacts_created", "CORRELATED SCALAR SUBQUERY 1", "SCAN f VIRTUAL TABLE INDEX 0:="]);
  });

  test("both plans of a name search return the same rows for every needle kind, sort, direction, cursor and page", () => {
    // a trigram match, an ASCII needle too short for trigrams (LIKE), one beyond ASCII (each spelling)
    for (const fullName of ["irst1", "a", "t3", "öd"]) {
      for (const sortBy of CONTACT_SORTS) {
        for (const direction of ["asc", "desc"] as const) {
          for (const cursor of Object.values(CURSORS)) {
            for (const [limit, offset] of [[4, 0], [4, 4], [100, 0]] as const) {
              const page = { sortBy, direction, cursor: cursor(sortBy), limit, offset };
              const fetched = listContacts(h.rt.db, { fullName }, { ...page, matches: 0 });
              const walked = listContacts(h.rt.db, { fullName }, { ...page, matches: 40 });
              expect({ fullName, sortBy, direction, page, ids: walked.map((r) => r.id) }).toEqual({ fullName, sortBy, direction, page, ids: fetched.map((r) => r.id) });
            }
          }
        }
      }
    }
    expect(["irst1", "a", "t3", "öd"].map((fullName) => countContacts(h.rt.db, { fullName }) > 0)).toEqual([true, true, true, true]);
  });

  test("full_name needles too short for trigrams, or with % or _, still never scan contacts", () => {
    for (const fullName of ["a", "ab", "50%", "a_b"]) {
      const { db, captured } = capturing(h.rt.db);
      listContacts(db, { fullName }, { sortBy: "created_at", direction: "desc", cursor: null, limit: 10, offset: 0, matches: countContacts(h.rt.db, { fullName }) });
      countContacts(db, { fullName });
      for (const c of captured) expectIndexed(fullName, planOf(c));
    }
  });

  test("the whole list path, accounts by name and domain, and users use indexes", () => {
    const { db, captured } = capturing(h.rt.db);
    listContactsPage(db, { email: "P1@example.com", include: "accounts,assigned_user,assigned_users" });
    listContactsPage(db, { per_page: "5", sort_by: "last_name" });
    listAccountsPage(db, { name: "acme" });
    listAccountsPage(db, { domain: "ACME.test" });
    listUsersPage(db, {});
    const plans = captured.map((c) => ({ sql: c.sql, plan: planOf(c) }));
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
