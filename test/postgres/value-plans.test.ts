import { afterAll, beforeAll, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { listContactsPage, searchContacts } from "../../server/contacts/service.ts";
import { openPostgres, type PostgresDatabase } from "../../server/db/postgres.ts";
import { migratePostgres } from "../../server/db/postgres-migrations.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { SecretBox } from "../../server/webhooks/secrets.ts";

// Bun prepares every statement on its connection, and from the 6th run PostgreSQL may keep one
// generic plan for it: for a name search that plan reads the whole trigram index and rechecks every
// row, whatever the needle, where a needle without trigrams needs a seq scan (0.3-0.6 s against
// 0.1 s on 300,000 contacts); for several relations, the plan made for a broad tag is kept for a
// rare one (a count 270 ms instead of 24 on 1,000,000 contacts).

/** searched is the database of 3,000 contacts (tag common on the even ones, rare on 1 in 100, an account on 1 in 3, a user assigned to the odd ones) the searches run on, through one connection: the prepared statements they leave are those pg_prepared_statements shows. */
let searched: { server: TestDatabase; db: PostgresDatabase } | undefined;
let db: PostgresDatabase;
const USER = "usr_01M8PLANS0000000000000000";
const ACCOUNT = "acc_01M8PLANS0000000000000000";
/** secrets seals the list's cursors: any key will do, no cursor is read back. */
const secrets = new SecretBox(randomBytes(32));

beforeAll(async () => {
  const server = await createTestDatabase();
  searched = { server, db: await openPostgres(server.url, 1) };
  db = searched.db;
  await migratePostgres(db);
  await db.run("INSERT INTO users (id, name, email, created_at, updated_at) VALUES (?, 'Planner', 'planner@example.com', 1, 1)", [USER]);
  await db.run(
    `INSERT INTO contacts (id, first_name, last_name, first_name_key, last_name_key, assigned_user_id, properties, account_ids, assigned_user_ids, version, created_at, updated_at)
     SELECT 'con_' || lpad(i::text, 26, '0'), 'First' || i, 'Last' || (i % 97), 'first' || i, 'last' || (i % 97), CASE WHEN i % 2 = 1 THEN ? END, '{}', '[]', '[]', 1, i, i FROM generate_series(1, 3000) i`,
    [USER],
  );
  await db.run("INSERT INTO accounts (id, name, created_at, updated_at) VALUES (?, 'Acme', 1, 1)", [ACCOUNT]);
  await db.run(
    `INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name_key, last_name_key)
     SELECT id, tag, created_at, updated_at, first_name_key, last_name_key FROM contacts, unnest(ARRAY['common', 'rare']) tag
     WHERE (tag = 'common' AND created_at % 2 = 0) OR (tag = 'rare' AND created_at % 100 = 0)`,
  );
  await db.run(
    `INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at, first_name_key, last_name_key)
     SELECT id, ?, 0, created_at, updated_at, first_name_key, last_name_key FROM contacts WHERE created_at % 3 = 0`,
    [ACCOUNT],
  );
  await db.run("ANALYZE");
}, 60_000);

afterAll(async () => {
  await searched?.db.close();
  await searched?.server.drop();
});

/** namePlans lists the plans PostgreSQL made for the prepared name-search statements on the one connection. */
const namePlans = () =>
  db.all<{ statement: string; generic_plans: number; custom_plans: number }>(
    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%full_name ILIKE%' ORDER BY statement",
  );

test("name searches run again and again, through the API list and the console, are each planned for their own needle: never a generic plan", async () => {
  for (let run = 0; run < 8; run++) {
    for (const needle of ["a", "st1", "%%%"]) {
      const listed = JSON.parse(await listContactsPage(db, secrets, { full_name: needle }, "test"));
      expect({ needle, found: listed.meta.total > 0 }).toEqual({ needle, found: needle !== "%%%" });
      await searchContacts(db, { fullName: needle }, null, 10, "test");
    }
  }
  const plans = await namePlans();
  // the count and the page of the list, the console's page (its count is the list's statement)
  expect(plans.length).toBeGreaterThanOrEqual(3);
  for (const plan of plans) expect({ statement: plan.statement, generic_plans: plan.generic_plans, custom: plan.custom_plans >= 8 }).toEqual({ statement: plan.statement, generic_plans: 0, custom: true });
});

/** relationPlans lists the plans PostgreSQL made for the prepared statements of lists and counts with several relations on the one connection. */
const relationPlans = () =>
  db.all<{ statement: string; generic_plans: number; custom_plans: number }>(
    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement ~ 'contact_tags|contact_accounts|assigned_user_id' AND statement ~ '^SELECT (count|c\\.id)' ORDER BY statement",
  );

test("lists of several relations run again and again, a broad tag and a rare one in turn, are each planned for their own values: never a generic plan", async () => {
  const expected = { "tag=common,rare": 30, "tag=rare&account_id": 10, "tag=common&account_id": 500, "tag=rare&assigned_user_id": 0, "tag=common&assigned_user_id": 0, "account_id&assigned_user_id": 500 };
  const queries: Record<keyof typeof expected, Record<string, string>> = {
    "tag=common,rare": { tag: "common,rare" },
    "tag=rare&account_id": { tag: "rare", account_id: ACCOUNT },
    "tag=common&account_id": { tag: "common", account_id: ACCOUNT },
    "tag=rare&assigned_user_id": { tag: "rare", assigned_user_id: USER },
    "tag=common&assigned_user_id": { tag: "common", assigned_user_id: USER },
    "account_id&assigned_user_id": { account_id: ACCOUNT, assigned_user_id: USER },
  };
  for (let run = 0; run < 8; run++) {
    const totals = Object.fromEntries(await Promise.all(Object.entries(queries).map(async ([name, query]) => [name, JSON.parse(await listContactsPage(db, secrets, { ...query, per_page: "5" }, "test")).meta.total])));
    expect(totals).toEqual(expected);
  }
  const plans = await relationPlans();
  // the counts and pages of each driver and probe
  expect(plans.length).toBeGreaterThanOrEqual(6);
  for (const plan of plans) expect({ statement: plan.statement, generic_plans: plan.generic_plans }).toEqual({ statement: plan.statement, generic_plans: 0 });
});
