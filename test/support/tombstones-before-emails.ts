import type { Database } from "../../server/db/sql.ts";

// What a crm before migration 0053 left of deleted contacts and an account: their tombstones,
// without an email, and the events about them the delivery retention kept. The SQLite and the
// PostgreSQL migration tests build it, upgrade it and read the emails 0053 gave the tombstones.

/** event is the payload of an event about a record, as the service writes it: an erased one holds only its type and ids. */
const event = (type: string, id: string, data: Record<string, unknown>) => JSON.stringify({ type, event_id: id, data });

/** EVENTS_BEFORE are the events kept: id, type, subject and what else their data held, created_at, erased_at. */
const EVENTS_BEFORE = [
  ["evt_1", "contact.created", "con_renamed", { email: "old@example.com" }, 1, null],
  ["evt_2", "contact.updated", "con_renamed", { email: "new@example.com" }, 2, null],
  ["evt_3", "contact.deleted", "con_renamed", { version: 3 }, 3, null],
  ["evt_4", "contact.created", "con_erased", {}, 1, 5],
  ["evt_5", "contact.created", "con_no_email", { first_name: "Nameless" }, 1, null],
  ["evt_6", "contact.created", "con_live", { email: "live@example.com" }, 1, null],
  ["evt_7", "account.created", "acc_gone", { name: "Gone" }, 1, null],
] as const;

/** TOMBSTONES_BEFORE are the deletions kept: the contact whose events the retention pruned among them. */
const TOMBSTONES_BEFORE = [
  ["contact", "con_renamed"],
  ["contact", "con_erased"],
  ["contact", "con_no_email"],
  ["contact", "con_pruned"],
  ["account", "acc_gone"],
] as const;

/** storeDeletionsBeforeEmails writes TOMBSTONES_BEFORE and EVENTS_BEFORE as a crm before 0053 could have stored them. */
export function storeDeletionsBeforeEmails(db: Database): Promise<void> {
  return db.write(async (tx) => {
    for (const [id, type, subject, data, at, erased] of EVENTS_BEFORE) {
      await tx.run("INSERT INTO events (id, type, payload, created_at, erased_at) VALUES (?, ?, ?, ?, ?)", [id, type, event(type, id, { id: subject, ...data }), at, erased]);
    }
    for (const [resource, id] of TOMBSTONES_BEFORE) await tx.run("INSERT INTO tombstones (resource, id, deleted_at, version) VALUES (?, ?, 4, 3)", [resource, id]);
  });
}

/** tombstoneEmails reads every tombstone's email, by resource and id. */
export async function tombstoneEmails(db: Database): Promise<unknown[]> {
  const rows = await db.all<{ resource: string; id: string; email: string | null }>("SELECT resource, id, email FROM tombstones");
  return rows.sort((a, b) => (a.resource + a.id < b.resource + b.id ? -1 : 1));
}

/**
 * EMAILS_AFTER are the tombstones after 0053: a deleted contact keeps the email its newest event
 * held; the erased one, the one without an email, the one whose events are gone and the account
 * keep none.
 */
export const EMAILS_AFTER = [
  ["account", "acc_gone", null],
  ["contact", "con_erased", null],
  ["contact", "con_no_email", null],
  ["contact", "con_pruned", null],
  ["contact", "con_renamed", "new@example.com"],
].map(([resource, id, email]) => ({ resource, id, email }));
