import type { Database } from "../../server/db/sql.ts";

// What a crm before 3fa1225 stored of a contact whose names and tags came decomposed (NFD, as a
// Mac or an export writes them), and of one whose tag came composed: the NFD contact carries café
// in both forms (two tags then), and is linked to an account. The SQLite and the PostgreSQL tests
// of migration 0040 build it, upgrade it, and read it through the API.

const NFD = (text: string) => text.normalize("NFD");

/** storeContactsBeforeNfc stores the two contacts, their tag rows and account link as that crm wrote them (the counts by their triggers). */
export async function storeContactsBeforeNfc(db: Database): Promise<void> {
  const properties = { custom_fields: { plan: "pro", big: 12 }, tags: [NFD("café"), "café", "x", NFD("Zürich")], source: "crm-sync" };
  await db.write(async (tx) => {
    await tx.run("INSERT INTO accounts (id, name, name_key, properties, created_at, updated_at) VALUES ('acc_00000000000000000000000001', 'Acme', 'acme', '{}', 1, 1)");
    await tx.run(
      "INSERT INTO contacts (id, first_name, last_name, email, properties, account_ids, version, created_at, updated_at) VALUES (?, ?, ?, 'jose@example.com', ?, '[\"acc_00000000000000000000000001\"]', 3, 1000, 2000), ('con_nfc', 'Ada', NULL, NULL, ?, '[]', 1, 1000, 1000)",
      ["con_nfd", NFD("José"), NFD("Núñez"), JSON.stringify(properties), JSON.stringify({ tags: ["café"] })],
    );
    for (const [contact, tag] of [["con_nfd", NFD("café")], ["con_nfd", "café"], ["con_nfd", "x"], ["con_nfd", NFD("Zürich")], ["con_nfc", "café"]] as const) {
      await tx.run("INSERT INTO contact_tags (contact_id, tag, created_at, updated_at, first_name, last_name, email) SELECT id, ?, created_at, updated_at, first_name, last_name, email FROM contacts WHERE id = ?", [tag, contact]);
    }
    await tx.run("INSERT INTO contact_accounts (contact_id, account_id, position, created_at, updated_at, first_name, last_name, email) SELECT id, 'acc_00000000000000000000000001', 0, created_at, updated_at, first_name, last_name, email FROM contacts WHERE id = 'con_nfd'");
  });
}

/** NFC_CONTACT is the NFD contact as the API answers it after 0040: names and tags in NFC, café once, its version and updated_at as they were. */
export const NFC_CONTACT = {
  id: "con_nfd",
  first_name: "José",
  last_name: "Núñez",
  full_name: "José Núñez",
  email: "jose@example.com",
  phone: null,
  external_id: null,
  assigned_user_id: null,
  assigned_user_ids: [],
  custom_fields: { plan: "pro", big: 12 },
  tags: ["café", "x", "Zürich"],
  consent: null,
  source: "crm-sync",
  account_ids: ["acc_00000000000000000000000001"],
  version: 3,
  created_at: new Date(1000).toISOString(),
  updated_at: new Date(2000).toISOString(),
};

/** nfcRows reads the rows 0040 rewrites besides the contact's: its tag rows and account link with their names' sort keys (their copies of the names, keyed by 0045), and the tag counts. */
export async function nfcRows(db: Database): Promise<unknown> {
  // Sorted here, in code point order: a PostgreSQL database's collation may sort otherwise.
  const sorted = (rows: Record<string, unknown>[]) => rows.map((row) => JSON.stringify(row)).sort().map((row) => JSON.parse(row));
  return {
    tags: sorted(await db.all("SELECT contact_id, tag, first_name_key, last_name_key FROM contact_tags")),
    accounts: await db.all("SELECT contact_id, first_name_key, last_name_key FROM contact_accounts"),
    counts: sorted(await db.all("SELECT value, n FROM contact_filter_counts WHERE filter = 'tag'")),
    events: await db.all("SELECT type FROM events"),
  };
}

/** NFC_ROWS are those rows after 0040. */
export const NFC_ROWS = {
  tags: [
    { contact_id: "con_nfc", tag: "café", first_name_key: "ada", last_name_key: null },
    { contact_id: "con_nfd", tag: "Zürich", first_name_key: "josé", last_name_key: "núñez" },
    { contact_id: "con_nfd", tag: "café", first_name_key: "josé", last_name_key: "núñez" },
    { contact_id: "con_nfd", tag: "x", first_name_key: "josé", last_name_key: "núñez" },
  ],
  accounts: [{ contact_id: "con_nfd", first_name_key: "josé", last_name_key: "núñez" }],
  counts: [
    { n: 1, value: "Zürich" },
    { n: 2, value: "café" },
    { n: 1, value: "x" },
  ],
  events: [],
};

/** readAfterNfc reads, through the API, what the audit found broken: the contact, its own values as filters (in both forms), and a tag's removal. */
export async function readAfterNfc(app: { handle: (request: Request) => Promise<Response> }, token: string): Promise<unknown> {
  const get = async (method: string, path: string) => {
    const res = await app.handle(new Request(`http://localhost${path}`, { method, headers: { authorization: `Bearer ${token}` } }));
    return res.json() as Promise<any>;
  };
  const ids = async (query: string) => {
    const answer = await get("GET", `/public/v1/contacts?${query}`);
    return answer.data?.map((c: { id: string }) => c.id) ?? answer;
  };
  return {
    contact: (await get("GET", "/public/v1/contacts/con_nfd")).data,
    byTag: [await ids(`tag=${encodeURIComponent("café")}`), await ids(`tag=${encodeURIComponent(NFD("café"))}`), await ids(`tag=${encodeURIComponent(NFD("Zürich"))}`)],
    byName: [await ids(`full_name=${encodeURIComponent("José")}`), await ids(`full_name=${encodeURIComponent(NFD("Núñez"))}`)],
    byAccount: await ids("account_id=acc_00000000000000000000000001&sort_by=first_name"),
    removed: (await get("DELETE", `/public/v1/contacts/con_nfd/tags/${encodeURIComponent(NFD("café"))}`)).data.tags,
  };
}

/** READ_AFTER_NFC is what readAfterNfc finds after 0040. */
export const READ_AFTER_NFC = {
  contact: NFC_CONTACT,
  byTag: [["con_nfd", "con_nfc"], ["con_nfd", "con_nfc"], ["con_nfd"]],
  byName: [["con_nfd"], ["con_nfd"]],
  byAccount: ["con_nfd"],
  removed: ["x", "Zürich"],
};
