import type { Database as SqliteConnection } from "bun:sqlite";
import type { Database } from "../server/db/sql.ts";
import { insertContact, keyContactNames } from "../server/contacts/store.ts";
import { newId } from "../server/shared/ids.ts";

/** seedContacts inserts `count` contacts (contact1@example.com ...) in one transaction, one second apart, oldest first. */
export async function seedContacts(db: Database, count: number, now = Date.now()): Promise<void> {
  const first = now - count * 1000;
  await db.write(async (tx) => {
    for (let i = 1; i <= count; i++) {
      const at = first + i * 1000;
      await insertContact(tx, {
        id: newId("con", at),
        first_name: `First${i % 5000}`,
        last_name: `Last${i}`,
        email: `contact${i}@example.com`,
        phone: "+44 20 7946 0000",
        external_id: null,
        assigned_user_id: null,
        properties: JSON.stringify({ tags: ["seed", i % 2 ? "odd" : "even"], custom_fields: { plan: "pro", seats: i % 50 } }),
        account_ids: "[]",
        assigned_user_ids: "[]",
        version: 1,
        created_at: at,
        updated_at: at,
      });
    }
  });
}

/** relationRowsOfCopies keys the names of contacts inserted by SQL (as migration 0045 does), and writes their tag and account rows, from their tags and account_ids copies, with the sort keys they carry (sqlite-only). */
export function relationRowsOfCopies(sqlite: SqliteConnection): void {
  keyContactNames(sqlite);
  sqlite.run(
    `INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name_key, last_name_key, email)
     SELECT c.id, j.value, c.created_at, c.updated_at, c.first_name_key, c.last_name_key, c.email FROM contacts c, json_each(c.properties, '$.tags') j`,
  );
  sqlite.run(
    `INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at, first_name_key, last_name_key, email)
     SELECT c.id, j.value, j.key, c.created_at, c.updated_at, c.first_name_key, c.last_name_key, c.email FROM contacts c, json_each(c.account_ids) j`,
  );
}
