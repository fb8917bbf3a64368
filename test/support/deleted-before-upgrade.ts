import type { Database } from "../../server/db/sql.ts";
import { canonicalJson } from "../../server/idempotency/service.ts";
import { sha256 } from "../../server/shared/crypto.ts";

// What a crm before migration 0030 left of a contact and an account deleted within the last 24
// hours: their tombstones, and the answers kept for replaying their creates (and the contact's
// tag) still whole; beside them the kept create of a contact still there. The SQLite and the
// PostgreSQL migration tests build it, upgrade it and replay every answer.

/** gone is the whole 410 a replay answers once the resource its kept answer showed was deleted. */
export const gone = (resource: "contact" | "account" | "user", id: string) => ({
  type: "urn:crm:problem:replay-resource-deleted",
  title: "Gone",
  status: 410,
  detail: `The answer kept for this Idempotency-Key showed ${resource} ${id}, which has been deleted since, so it is not shown again. The request was made once and is not made again; a new request needs a new key.`,
  [`${resource}_id`]: id,
});

/** withdrawn is a kept answer as a delete leaves it now (withdrawIdempotencyRecordsOf). */
const withdrawn = (resource: "contact" | "account", id: string) => ({ status: 410, response_body: JSON.stringify({ resource, id }) });

const deletedContact = { id: "con_gone", first_name: "Gone", email: "gone@example.com", custom_fields: { diagnosis: "secret-cf-value" } };
const liveContact = { id: "con_live", first_name: "Live" };

/** KEPT_BEFORE_UPGRADE are the requests whose answers were kept, with what their replay answers after the upgrade and what their row holds. */
export const KEPT_BEFORE_UPGRADE = [
  {
    key: "contact-gone",
    path: "/public/v1/contacts",
    body: { first_name: "Gone", email: "gone@example.com", custom_fields: { diagnosis: "secret-cf-value" } },
    kept: { status: 201, answer: { data: deletedContact } },
    replay: { status: 410, replayed: null, body: gone("contact", "con_gone") },
    row: withdrawn("contact", "con_gone"),
  },
  {
    key: "tag-gone",
    path: "/public/v1/contacts/con_gone/tags",
    body: { tag: "vip" },
    kept: { status: 200, answer: { data: { ...deletedContact, tags: ["vip"] } } },
    replay: { status: 410, replayed: null, body: gone("contact", "con_gone") },
    row: withdrawn("contact", "con_gone"),
  },
  {
    key: "account-gone",
    path: "/public/v1/accounts",
    body: { name: "Secret Clinic", domain: "secret-clinic.example" },
    kept: { status: 201, answer: { data: { id: "acc_gone", name: "Secret Clinic", domain: "secret-clinic.example" } } },
    replay: { status: 410, replayed: null, body: gone("account", "acc_gone") },
    row: withdrawn("account", "acc_gone"),
  },
  {
    key: "contact-live",
    path: "/public/v1/contacts",
    body: { first_name: "Live" },
    kept: { status: 201, answer: { data: liveContact } },
    replay: { status: 201, replayed: "true", body: { data: liveContact } },
    row: { status: 201, response_body: JSON.stringify({ data: liveContact }) },
  },
];

/** tokenBeforeUpgrade stores an API token as a crm before 0047 did (no maker), for a database not migrated past it, and returns it with its id. */
export async function tokenBeforeUpgrade(db: Database, now = Date.now()): Promise<{ token: string; id: string }> {
  const token = `crm_${"0123456789".repeat(4)}`;
  const id = "tok_01JDB7Y1Q7A6T5ZV3C8W9X0K2M";
  await db.run("INSERT INTO api_tokens (id, name, prefix, token_hash, created_at) VALUES (?, 'old', ?, ?, ?)", [id, token.slice(0, 12), sha256(token), now]);
  return { token, id };
}

/** keepAnswersOfRecordsDeletedBeforeUpgrade writes, into a database before 0030, the deletions, the live contact and the kept answers of KEPT_BEFORE_UPGRADE, under the token given. */
export async function keepAnswersOfRecordsDeletedBeforeUpgrade(db: Database, tokenId: string, now = Date.now()): Promise<void> {
  await db.write(async (tx) => {
    await tx.run("INSERT INTO contacts (id, first_name, created_at, updated_at) VALUES (?, ?, ?, ?)", [liveContact.id, liveContact.first_name, now, now]);
    await tx.run("INSERT INTO tombstones (resource, id, deleted_at) VALUES ('contact', 'con_gone', ?), ('account', 'acc_gone', ?)", [now, now]);
    for (const k of KEPT_BEFORE_UPGRADE) {
      // The fingerprint as the idempotency guard takes it: SHA-256 of the body's canonical JSON.
      await tx.run("INSERT INTO idempotency_keys (token_id, method, path, idem_key, fingerprint, status, response_body, created_at) VALUES (?, 'POST', ?, ?, ?, ?, ?, ?)", [
        tokenId, k.path, k.key, sha256(canonicalJson(k.body)), k.kept.status, JSON.stringify(k.kept.answer), now,
      ]);
    }
  });
}

/** replayKeptAnswers sends each request of KEPT_BEFORE_UPGRADE again with its key and returns what it answered. */
export async function replayKeptAnswers(app: { handle(request: Request): Promise<Response> }, token: string) {
  const replays = [];
  for (const k of KEPT_BEFORE_UPGRADE) {
    const res = await app.handle(
      new Request(`http://localhost${k.path}`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "idempotency-key": k.key }, body: JSON.stringify(k.body) }),
    );
    replays.push({ status: res.status, replayed: res.headers.get("idempotent-replayed"), body: await res.json() });
  }
  return replays;
}

/** keptRows reads the kept answers' rows in the order of KEPT_BEFORE_UPGRADE. */
export async function keptRows(db: Database) {
  const rows = await db.all<{ idem_key: string; status: number; response_body: string }>("SELECT idem_key, status, response_body FROM idempotency_keys");
  return KEPT_BEFORE_UPGRADE.map((k) => {
    const { status, response_body } = rows.find((r) => r.idem_key === k.key)!;
    return { status, response_body };
  });
}
