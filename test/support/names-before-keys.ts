import type { Database } from "../../server/db/sql.ts";

// What a crm before migration 0045 stored of contacts whose names differ beyond ASCII case (an
// accent's capital, ß and SS, Turkish İ), with empty and missing names: the rows, a tag row and an
// account link each, carrying the names themselves as their sort copies. The SQLite and the
// PostgreSQL tests of migration 0045 build them, upgrade them, and read them through the API.

/** BEFORE_KEYS are the contacts, in the order of their ids: [id, first_name, last_name]. */
const BEFORE_KEYS: [string, string | null, string | null][] = [
  ["con_1", "émile", "STRAUSS"],
  ["con_2", "Émile", "Strauß"],
  ["con_3", "Zoe", "İlker"],
  ["con_4", null, "ilker"],
  ["con_5", "", null],
  ["con_6", "ΣΊΣΥΦΟΣ", "strauss"],
  ["con_7", "σίσυφος", "Émile"],
  ["con_8", "emile", "Ilker"],
];

/** storeContactsBeforeKeys stores the contacts, their tag rows and account links as that crm wrote them (the counts by their triggers). */
export async function storeContactsBeforeKeys(db: Database): Promise<void> {
  await db.write(async (tx) => {
    await tx.run("INSERT INTO accounts (id, name, name_key, properties, created_at, updated_at) VALUES ('acc_00000000000000000000000001', 'Acme', 'acme', '{}', 1, 1)");
    for (const [i, [id, first, last]] of BEFORE_KEYS.entries()) {
      await tx.run(
        "INSERT INTO contacts (id, first_name, last_name, properties, account_ids, version, created_at, updated_at) VALUES (?, ?, ?, ?, '[\"acc_00000000000000000000000001\"]', 2, ?, ?)",
        [id, first, last, JSON.stringify({ tags: ["old"] }), 1000 + i, 2000 + i],
      );
    }
    await tx.run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name, last_name, email) SELECT id, 'old', created_at, updated_at, first_name, last_name, email FROM contacts");
    await tx.run(
      "INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at, first_name, last_name, email) SELECT id, 'acc_00000000000000000000000001', 0, created_at, updated_at, first_name, last_name, email FROM contacts",
    );
  });
}

/** keyedRows reads what 0045 writes: each contact's name keys, beside those of its tag row and account link. */
export async function keyedRows(db: Database): Promise<unknown> {
  return {
    contacts: await db.all("SELECT id, first_name_key, last_name_key, version, updated_at FROM contacts ORDER BY id"),
    tags: await db.all("SELECT contact_id, first_name_key, last_name_key FROM contact_tags ORDER BY contact_id"),
    accounts: await db.all("SELECT contact_id, first_name_key, last_name_key FROM contact_accounts ORDER BY contact_id"),
    events: await db.all("SELECT type FROM events"),
  };
}

const KEYS: Record<string, [string | null, string | null]> = {
  con_1: ["émile", "strauss"],
  con_2: ["émile", "strauss"],
  con_3: ["zoe", "ilker"],
  con_4: [null, "ilker"],
  con_5: ["", null],
  con_6: ["σίσυφος", "strauss"],
  con_7: ["σίσυφος", "émile"],
  con_8: ["emile", "ilker"],
};
const keyed = (idColumn: string) => Object.entries(KEYS).map(([id, [first, last]]) => ({ [idColumn]: id, first_name_key: first, last_name_key: last }));

/** KEYED_ROWS are those rows after 0045: every name keyed, the contacts' version and updated_at as they were, no event. */
export const KEYED_ROWS = {
  contacts: keyed("id").map((row, i) => ({ ...row, version: 2, updated_at: 2000 + i })),
  tags: keyed("contact_id"),
  accounts: keyed("contact_id"),
  events: [],
};

/** readAfterKeys lists the contacts through the API in each name sort, unfiltered and by their tag and account, walked two at a time by cursor. */
export async function readAfterKeys(app: { handle: (request: Request) => Promise<Response> }, token: string): Promise<unknown> {
  const walk = async (query: string) => {
    const ids: string[] = [];
    for (let cursor = ""; ; ) {
      const res = await app.handle(new Request(`http://localhost/public/v1/contacts?per_page=2&${query}${cursor ? `&cursor=${cursor}` : ""}`, { headers: { authorization: `Bearer ${token}` } }));
      const body = (await res.json()) as { data: { id: string }[]; meta: { next_cursor: string | null } };
      ids.push(...body.data.map((contact) => contact.id));
      if (!body.meta.next_cursor) return ids;
      cursor = body.meta.next_cursor;
    }
  };
  const read: Record<string, string[]> = {};
  for (const sort of ["first_name", "last_name"]) {
    for (const filter of ["", "&tag=old", "&account_id=acc_00000000000000000000000001"]) read[`${sort}${filter}`] = await walk(`sort_by=${sort}&sort_direction=asc${filter}`);
  }
  return read;
}

const BY_FIRST_NAME = ["con_4", "con_5", "con_8", "con_3", "con_1", "con_2", "con_6", "con_7"];
const BY_LAST_NAME = ["con_5", "con_3", "con_4", "con_8", "con_1", "con_2", "con_6", "con_7"];

/** READ_AFTER_KEYS is what readAfterKeys finds after 0045: one order whatever the backend, by key, ties by id, NULLs first. */
export const READ_AFTER_KEYS = Object.fromEntries(
  ["first_name", "last_name"].flatMap((sort) => ["", "&tag=old", "&account_id=acc_00000000000000000000000001"].map((filter) => [`${sort}${filter}`, sort === "first_name" ? BY_FIRST_NAME : BY_LAST_NAME])),
);
