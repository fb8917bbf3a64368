import type { Database } from "../../server/db/sql.ts";

// What a crm before migration 0051 stored of names differing only in their white space (a no-break
// space, a doubled space, spaces at the ends): the keys kept it. The SQLite and the PostgreSQL tests
// of migration 0051 build them and upgrade them.

/** storeNamesBeforeWhiteSpace stores accounts and contacts keyed as that crm keyed them, at version 2, with a tag row and an account link each (the keys copied by the triggers). */
export async function storeNamesBeforeWhiteSpace(db: Database): Promise<void> {
  await db.write(async (tx) => {
    for (const [id, name] of [["acc_1", "Acme GmbH"], ["acc_2", "Acme\u00a0GmbH"], ["acc_3", "Acme  GmbH"], ["acc_4", "Beta Ltd"]] as const) {
      await tx.run("INSERT INTO accounts (id, name, name_key, properties, version, created_at, updated_at) VALUES (?, ?, ?, '{}', 2, 1, 2)", [id, name, name.toLowerCase()]);
    }
    for (const [id, first, last] of [["con_1", "Anne\u00a0Marie", " Curie "], ["con_2", "Bob", "Ray"]] as const) {
      await tx.run(
        "INSERT INTO contacts (id, first_name, last_name, first_name_key, last_name_key, properties, account_ids, version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, '[\"acc_4\"]', 2, 1, 2)",
        [id, first, last, first.toLowerCase(), last.toLowerCase(), JSON.stringify({ tags: ["old"] })],
      );
    }
    await tx.run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name_key, last_name_key, email) SELECT id, 'old', created_at, updated_at, first_name_key, last_name_key, email FROM contacts");
    await tx.run("INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at, first_name_key, last_name_key, email) SELECT id, 'acc_4', 0, created_at, updated_at, first_name_key, last_name_key, email FROM contacts");
  });
}

/** whiteSpaceRows reads what 0051 writes: the accounts' keys, each contact's name keys beside those of its tag row and account link, and the events. */
export async function whiteSpaceRows(db: Database): Promise<unknown> {
  return {
    accounts: await db.all("SELECT id, name_key, version, updated_at FROM accounts ORDER BY id"),
    contacts: await db.all("SELECT id, first_name_key, last_name_key, version, updated_at FROM contacts ORDER BY id"),
    tags: await db.all("SELECT contact_id, first_name_key, last_name_key FROM contact_tags ORDER BY contact_id"),
    links: await db.all("SELECT contact_id, first_name_key, last_name_key FROM contact_accounts ORDER BY contact_id"),
    events: await db.all("SELECT type FROM events"),
  };
}

const keys = (idColumn: string) => [
  { [idColumn]: "con_1", first_name_key: "anne marie", last_name_key: "curie" },
  { [idColumn]: "con_2", first_name_key: "bob", last_name_key: "ray" },
];

/** WHITE_SPACE_ROWS are those rows after 0051: the keys folded, versions and updated_at as they were, no event. */
export const WHITE_SPACE_ROWS = {
  accounts: ["acc_1", "acc_2", "acc_3"].map((id) => ({ id, name_key: "acme gmbh", version: 2, updated_at: 2 })).concat([{ id: "acc_4", name_key: "beta ltd", version: 2, updated_at: 2 }]),
  contacts: keys("id").map((row) => ({ ...row, version: 2, updated_at: 2 })),
  tags: keys("contact_id"),
  links: keys("contact_id"),
  events: [],
};

/** WHITE_SPACE_WARNINGS are the warnings 0051 gives of those accounts: the group its keys join. */
export const WHITE_SPACE_WARNINGS: [string, Record<string, unknown>][] = [
  [
    "migration: these accounts' names are one name under the new case or white space folding, so a batch upsert or crm import of that name without a domain now refuses it as matching several accounts: rename or delete all but one (README, Upgrading)",
    { migration: "0051_names_keyed_with_white_space_folded.sql", accounts: [{ id: "acc_1", name: "Acme GmbH" }, { id: "acc_2", name: "Acme\u00a0GmbH" }, { id: "acc_3", name: "Acme  GmbH" }] },
  ],
];
