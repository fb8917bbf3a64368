import { afterAll, beforeAll, expect, test } from "bun:test";
import { listContactsPage, searchContacts } from "../../server/contacts/service.ts";
import { openPostgres, type PostgresDatabase } from "../../server/db/postgres.ts";
import { migratePostgres } from "../../server/db/postgres-migrations.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// Bun prepares every statement on its connection, and from the 6th run PostgreSQL may keep one
// generic plan for it: for a name search that plan reads the whole trigram index and rechecks every
// row, whatever the needle, where a needle without trigrams needs a seq scan (0.3-0.6 s against
// 0.1 s on 300,000 contacts).

/** searched is the database of 3,000 contacts the searches run on, through one connection: the prepared statements they leave are those pg_prepared_statements shows. */
let searched: { server: TestDatabase; db: PostgresDatabase } | undefined;
let db: PostgresDatabase;

beforeAll(async () => {
  const server = await createTestDatabase();
  searched = { server, db: await openPostgres(server.url, 1) };
  db = searched.db;
  await migratePostgres(db);
  await db.run(
    `INSERT INTO contacts (id, first_name, last_name, properties, account_ids, assigned_user_ids, version, created_at, updated_at)
     SELECT 'con_' || lpad(i::text, 26, '0'), 'First' || i, 'Last' || (i % 97), '{}', '[]', '[]', 1, i, i FROM generate_series(1, 3000) i`,
  );
  await db.run("ANALYZE contacts");
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
      const listed = JSON.parse(await listContactsPage(db, { full_name: needle }));
      expect({ needle, found: listed.meta.total > 0 }).toEqual({ needle, found: needle !== "%%%" });
      await searchContacts(db, { fullName: needle }, null, 10);
    }
  }
  const plans = await namePlans();
  // the count and the page of the list, the console's page (its count is the list's statement)
  expect(plans.length).toBeGreaterThanOrEqual(3);
  for (const plan of plans) expect({ statement: plan.statement, generic_plans: plan.generic_plans, custom: plan.custom_plans >= 8 }).toEqual({ statement: plan.statement, generic_plans: 0, custom: true });
});
