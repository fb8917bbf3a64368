import { afterAll, beforeAll, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { listContactsPage } from "../../server/contacts/service.ts";
import type { ContactSort } from "../../server/contacts/model.ts";
import { countContacts, listContactVersions, type ContactFilters, type ContactPage } from "../../server/contacts/store.ts";
import { openPostgres, type PostgresDatabase } from "../../server/db/postgres.ts";
import { migratePostgres } from "../../server/db/postgres-migrations.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { capturing, postgresPlan, type Captured } from "../support/query-plans.ts";
import { SecretBox } from "../../server/webhooks/secrets.ts";

// A page whose few matches sit together in the sort order (a surname searched and sorted by
// surname, the newest contacts sorted by their last change, a tag pair whose window missed):
// PostgreSQL costs a walk of the sort index as if the matches were spread evenly, and walked it,
// filtering every contact before them (1 s for `full_name=smith&sort_by=last_name` on 200,000
// contacts). The count read just before says how few they are: the page collects them and sorts
// (a name search first reads a window of the sort index, as on SQLite, which finds spread matches).

const CONTACTS = 20_000;
const START = 1_700_000_000_000;
let server: TestDatabase;
let db: PostgresDatabase;
/** secrets seals the list's cursors: any key will do, no cursor is read back. */
const secrets = new SecretBox(randomBytes(32));

beforeAll(async () => {
  server = await createTestDatabase();
  db = await openPostgres(server.url, 2);
  await migratePostgres(db);
  // 1 in 50 is a Smith (sorted after every Last…); a quarter changed later than created (never
  // tagged half); `old` is the oldest 5%.
  await db.run(
    `INSERT INTO contacts (id, first_name, last_name, email, properties, account_ids, assigned_user_ids, version, created_at, updated_at)
     SELECT 'con_' || lpad(i::text, 26, '0'), 'First' || (i % 300), CASE WHEN i % 50 = 0 THEN 'Smith' || (i % 7) ELSE 'Last' || lpad(((i * 7919) % 100003)::text, 6, '0') END,
            'p' || i || '@example.com', '{"custom_fields":{"notes":"' || repeat('n', 100) || '"}}', '[]', '[]', 1,
            ${START} + i * 1000, ${START} + i * 1000 + CASE WHEN i % 4 = 0 THEN ((i * 7907) % 20011) * 1000 ELSE 0 END
     FROM generate_series(1, ${CONTACTS}) i`,
  );
  // ASCII names: their keys (nameKey) are their lowercase
  await db.run("UPDATE contacts SET first_name_key = lower(first_name::text), last_name_key = lower(last_name::text)");
  await db.run(
    `INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name_key, last_name_key, email)
     SELECT c.id, t.tag, c.created_at, c.updated_at, c.first_name_key, c.last_name_key, c.email FROM contacts c, unnest(ARRAY['half', 'old']) t(tag)
     WHERE (t.tag = 'half' AND c.updated_at = c.created_at AND c.created_at % 2000 = 0) OR (t.tag = 'old' AND c.created_at < ${START + (CONTACTS / 20) * 1000})`,
  );
  await db.run("VACUUM ANALYZE");
}, 60_000);

afterAll(async () => {
  await db?.close();
  await server?.drop();
});

/** pagePlans reads a page of the list with its count, as the service does, and returns the plan of each page statement that fetched the matches (not a window's). */
async function pagePlans(filters: ContactFilters, page: Omit<ContactPage, "matches" | "cursor" | "offset">): Promise<{ plans: string[][]; matches: number }> {
  const matches = await countContacts(db, filters);
  const { db: spy, captured } = capturing(db);
  await listContactVersions(spy, filters, { ...page, cursor: null, offset: 0, matches });
  return { plans: await Promise.all(fetches(captured).map((c) => postgresPlan(db, c))), matches };
}

/** fetches are the page statements that read the matches from the filters' own indexes or the sort's: not a window of a relation (`) w`), nor the page's rows read by id. */
const fetches = (captured: Captured[]) => captured.filter((c) => c.sql.startsWith("SELECT c.id") && c.sql.includes("ORDER BY") && !c.sql.includes(") w"));

const SORT_INDEX: Record<ContactSort, string> = { created_at: "contacts_created", updated_at: "contacts_updated", first_name: "contacts_first_name", last_name: "contacts_last_name", email: "contacts_email" };

/** walked names the step of a plan that reads contacts in order from the sort's index, or null when the matches are collected from their own indexes first and sorted. */
const walked = (sortBy: ContactSort) => (plan: string[]) => plan.find((line) => line.includes(`Index Scan using ${SORT_INDEX[sortBy]} `) || line.includes(`Index Scan Backward using ${SORT_INDEX[sortBy]} `))?.trim() ?? null;

test("a page of few matches clustered in the sort order collects them and sorts them: a name sorted by a name (after its window missed), a narrow time filter sorted by the other time, a tag pair's fetch after its window missed", async () => {
  const cases: [string, ContactFilters, Omit<ContactPage, "matches" | "cursor" | "offset">][] = [
    ["full_name=smith by last_name", { fullName: "smith" }, { sortBy: "last_name", direction: "asc", limit: 26 }],
    ["created_after=<newest 5%> by updated_at", { createdAfter: START + (CONTACTS - 1000) * 1000 }, { sortBy: "updated_at", direction: "asc", limit: 26 }],
    ["tag=half,old by updated_at desc", { tags: ["half", "old"] }, { sortBy: "updated_at", direction: "desc", limit: 26 }],
    ["full_name=smith by created_at desc", { fullName: "smith" }, { sortBy: "created_at", direction: "desc", limit: 26 }],
  ];
  const read = [];
  for (const [label, filters, page] of cases) {
    const { plans, matches } = await pagePlans(filters, page);
    read.push({ label, matches, fetched: plans.length > 0, walked: plans.map(walked(page.sortBy)) });
  }
  expect(read).toEqual([
    { label: "full_name=smith by last_name", matches: 400, fetched: true, walked: [null] },
    { label: "created_after=<newest 5%> by updated_at", matches: 1000, fetched: true, walked: [null] },
    { label: "tag=half,old by updated_at desc", matches: 250, fetched: true, walked: [null] },
    // spread in the order: found in a window of the sort index (twice the entries they need), not fetched
    { label: "full_name=smith by created_at desc", matches: 400, fetched: false, walked: [] },
  ]);
});

test("a name search beside a tag is counted before its page, which collects its few matches rather than walk the sort index", async () => {
  const { db: spy, captured } = capturing(db);
  const listed = JSON.parse(await listContactsPage(spy, secrets, { full_name: "smith", tag: "half", sort_by: "last_name", per_page: "5" }, "test"));
  expect(listed.meta.total).toBe(200);
  const plans = await Promise.all(fetches(captured).map((c) => postgresPlan(db, c)));
  expect({ counted: captured[0]!.sql.startsWith("SELECT count(*)"), walked: plans.map(walked("last_name")) }).toEqual({ counted: true, walked: plans.map(() => null) });
});
