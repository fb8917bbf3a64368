import { afterEach, beforeEach, expect, test } from "bun:test";
import { createApp, createRuntime, type App } from "../../server/app.ts";
import { openBackend } from "../../server/db/backend.ts";
import { createLogger } from "../../server/shared/log.ts";
import { deliveryQueueStats } from "../../server/webhooks/service.ts";
import { updateDeliveryAfterAttempt } from "../../server/webhooks/store.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { addStoredSubscription } from "../webhooks/support.ts";

// The README's incremental sync ("Keeping another system in step") across a wall clock stepped back
// by 2 minutes. The stamps a clock 2 minutes fast left are written into the tables as values (no
// test patches Date.now), and the service is opened again on the database, as after a restart or
// by another instance: what it stamps from then on must not be below them, or a poller whose
// watermark moved up to them never lists it.

const AHEAD_MS = 120_000;
const OVERLAP_MS = 5_000;

let h: Harness;
let reopened: { app: App; close(): Promise<void> } | null = null;
beforeEach(async () => (h = await createHarness()));
afterEach(async () => {
  await reopened?.close();
  reopened = null;
  await h.close();
});

/** reopen opens the harness's database again and serves the API on it, with the harness's token, logging to `log` (the lines it is given) when given. */
async function reopen(log?: string[]): Promise<App> {
  const db = await openBackend(h.rt.config);
  const rt = await createRuntime({ db, config: h.rt.config, log: log ? createLogger("warn", (line) => void log.push(line)) : createLogger("error") });
  reopened = { app: createApp(rt), close: () => db.close() };
  return reopened.app;
}

/** call sends a request to `app` with the harness's token and parses the answer. */
async function call(app: App, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const headers: Record<string, string> = { authorization: `Bearer ${h.token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await app.handle(new Request(`http://localhost${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) }));
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** readAll follows a list's cursors to its end. */
async function readAll(app: App, path: string): Promise<any[]> {
  const rows: any[] = [];
  let cursor: string | null = null;
  do {
    const res = await call(app, "GET", `${path}&per_page=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    expect(res.status).toBe(200);
    rows.push(...res.body.data);
    cursor = res.body.meta.next_cursor;
  } while (cursor);
  return rows;
}

/** Watermarks are a poller's U (per resource) and D (per resource), as the recipe keeps them. */
type Watermarks = Record<"contacts" | "accounts" | "users", { U: string; D: string }>;
const minusOverlap = (stamp: string) => new Date(Date.parse(stamp) - OVERLAP_MS).toISOString();

/** round runs one round of the recipe for each resource, moving its watermarks; returns the ids listed as changed and as deleted. */
async function round(app: App, marks: Watermarks): Promise<Record<string, { changed: string[]; deleted: string[] }>> {
  const listed: Record<string, { changed: string[]; deleted: string[] }> = {};
  for (const resource of ["contacts", "accounts", "users"] as const) {
    const changed = await readAll(app, `/public/v1/${resource}?updated_after=${encodeURIComponent(marks[resource].U)}&sort_by=updated_at&sort_direction=asc`);
    const deleted = await readAll(app, `/public/v1/${resource}/deleted?since=${encodeURIComponent(marks[resource].D)}`);
    if (changed.length > 0) marks[resource].U = minusOverlap(changed.at(-1).updated_at);
    if (deleted.length > 0) marks[resource].D = minusOverlap(deleted.at(-1).deleted_at);
    listed[resource] = { changed: changed.map((row) => row.id), deleted: deleted.map((row) => row.id) };
  }
  return listed;
}

test("after the clock is stepped back, changes and deletions are stamped no earlier than the stamps the fast clock left, and the sync recipe lists them", async () => {
  const post = async (resource: string, body: unknown) => (await h.json("POST", `/public/v1/${resource}`, { body })).body.data.id as string;
  const [fastContact, contact, doomedContact, goneContact] = [await post("contacts", { first_name: "Fast" }), await post("contacts", { first_name: "Later" }), await post("contacts", { first_name: "Doomed" }), await post("contacts", { first_name: "Gone" })];
  const [fastAccount, account, doomedAccount] = [await post("accounts", { name: "Fast" }), await post("accounts", { name: "Later" }), await post("accounts", { name: "Doomed" })];
  const [fastUser, user, doomedUser, goneUser] = [await post("users", { name: "Fast", email: "fast@example.com" }), await post("users", { name: "Later", email: "later@example.com" }), await post("users", { name: "Doomed", email: "doomed@example.com" }), await post("users", { name: "Gone", email: "gone@example.com" })];
  expect((await h.request("DELETE", `/public/v1/contacts/${goneContact}`)).status).toBe(204);
  expect((await h.request("DELETE", `/public/v1/users/${goneUser}`)).status).toBe(204);

  // What a clock 2 minutes fast stamped: a change of each resource, and a deletion of a contact and a user.
  const fast = Date.now() + AHEAD_MS;
  await h.rt.db.write(async (tx) => {
    for (const [table, id] of [["contacts", fastContact], ["accounts", fastAccount], ["users", fastUser]] as const) await tx.run(`UPDATE ${table} SET updated_at = ? WHERE id = ?`, [fast, id]);
    await tx.run("UPDATE tombstones SET deleted_at = ? WHERE id IN (?, ?)", [fast, goneContact, goneUser]);
  });
  const start = new Date(Date.now() - 60_000).toISOString();
  const marks: Watermarks = { contacts: { U: start, D: start }, accounts: { U: start, D: start }, users: { U: start, D: start } };
  await round(h.app, marks);
  const fastStamp = new Date(fast).toISOString();
  expect(marks).toEqual({
    contacts: { U: minusOverlap(fastStamp), D: minusOverlap(fastStamp) },
    accounts: { U: minusOverlap(fastStamp), D: start },
    users: { U: minusOverlap(fastStamp), D: minusOverlap(fastStamp) },
  });

  // The clock is right again (stepped back by 2 minutes), and the service opened again on the database.
  await addStoredSubscription(h.rt.db, Date.now());
  const app = await reopen();
  const changed = [
    await call(app, "PATCH", `/public/v1/contacts/${contact}`, { last_name: "after the step" }),
    await call(app, "PATCH", `/public/v1/accounts/${account}`, { name: "Later, after the step" }),
    await call(app, "PATCH", `/public/v1/users/${user}`, { name: "Later, after the step" }),
  ];
  // Stamped at the fast clock's last stamp, not earlier: the clock stands still until it catches up.
  expect(changed.map((res) => ({ status: res.status, updated_at: res.body.data.updated_at }))).toEqual(changed.map(() => ({ status: 200, updated_at: fastStamp })));
  for (const path of [`contacts/${doomedContact}`, `accounts/${doomedAccount}`, `users/${doomedUser}`]) expect((await call(app, "DELETE", `/public/v1/${path}`)).status).toBe(204);
  const deletions = await Promise.all(["contacts", "accounts", "users"].map((resource) => readAll(app, `/public/v1/${resource}/deleted?since=${encodeURIComponent(start)}`)));
  expect(deletions.flat().map((row) => row.deleted_at)).toEqual(deletions.flat().map(() => fastStamp));

  // A change's deliveries are dated, and due, by the wall clock: sent at once, not after the
  // step, while the loop goes on judging retries by the clock it reads.
  const made = await call(app, "POST", "/public/v1/contacts", { first_name: "Made after the step" });
  expect({ status: made.status, created_at: made.body.data.created_at }).toEqual({ status: 201, created_at: fastStamp });
  const delivery = await h.rt.db.get<{ created_at: number; next_attempt_at: number }>("SELECT d.created_at, d.next_attempt_at FROM webhook_deliveries d JOIN events e ON e.id = d.event_id WHERE e.payload LIKE ?", [`%${made.body.data.id}%`]);
  expect(Number(delivery?.created_at)).toBeLessThanOrEqual(Date.now());
  expect(Number(delivery?.next_attempt_at)).toBeLessThanOrEqual(Date.now());

  // Those sharing a stamp are listed by id; the next round lists every change and deletion made after the step.
  const listed = await round(app, marks);
  const sorted = (...ids: string[]) => ids.sort();
  expect(listed).toEqual({
    contacts: { changed: sorted(fastContact, contact, made.body.data.id), deleted: sorted(goneContact, doomedContact) },
    accounts: { changed: sorted(fastAccount, account), deleted: [doomedAccount] },
    users: { changed: sorted(fastUser, user), deleted: sorted(goneUser, doomedUser) },
  });
});

test("after a step back, a change's event and deliveries are dated by the wall clock, so the backlog's age and a recovery's window see them, and the event's timestamp is its change's stamp", async () => {
  const stepMs = 3_600_000;
  const subscription = await addStoredSubscription(h.rt.db, Date.now());
  const before = Date.now();
  // The wall clock stepped back by an hour: the change clock stands an hour ahead of it.
  h.rt.db.changeClock.raise(before + stepMs);
  const made = await h.json("POST", "/public/v1/contacts", { body: { first_name: "During the stand-still" } });
  const after = Date.now();
  const event = (await h.rt.db.get<{ id: string; payload: string; created_at: number }>("SELECT id, payload, created_at FROM events WHERE subject_id = ?", [made.body.data.id]))!;
  const delivery = (await h.rt.db.get<{ id: string; created_at: number; next_attempt_at: number }>("SELECT id, created_at, next_attempt_at FROM webhook_deliveries WHERE event_id = ?", [event.id]))!;
  const byWallClock = (ms: number) => Number(ms) >= before && Number(ms) <= after;
  const stamp = new Date(before + stepMs).toISOString();
  expect({
    updated_at: made.body.data.updated_at,
    timestamp: JSON.parse(event.payload).timestamp,
    event: byWallClock(event.created_at),
    delivery: byWallClock(delivery.created_at),
    due: byWallClock(delivery.next_attempt_at),
  }).toEqual({ updated_at: stamp, timestamp: stamp, event: true, delivery: true, due: true });

  // crm_webhook_oldest_pending_age_seconds: not below zero, so the backlog alert can fire.
  const queue = await deliveryQueueStats(h.rt.db);
  expect({ pending: queue.pending, aged: queue.oldest_pending_age_ms! >= 0 }).toEqual({ pending: 1, aged: true });

  // Failed for good (its receiver down), it is in a recovery of the last 10 minutes.
  await updateDeliveryAfterAttempt(h.rt.db, { id: delivery.id, status: "failed", attempts: 9, next_attempt_at: null, last_response_status: 503, last_error: null, recovered_at: null, updated_at: Date.now() });
  const recovered = await h.json("POST", `/public/v1/webhook-subscriptions/${subscription}/recover`, { body: { since: new Date(before - 600_000).toISOString() } });
  expect({ status: recovered.status, queued: recovered.body.data.queued }).toEqual({ status: 202, queued: 1 });
});

test("a stamp stored more than a day ahead is not followed, and is logged once; the clock standing more than a minute ahead is logged once a minute", async () => {
  const post = async (first_name: string) => (await h.json("POST", "/public/v1/contacts", { body: { first_name } })).body.data.id as string;
  const [wrong, fast] = [await post("Stamped by a clock ten years ahead"), await post("Stamped by a clock 2 minutes ahead")];
  const tenYears = Date.now() + 3_652 * 86_400_000;
  const twoMinutes = Date.now() + AHEAD_MS;
  await h.rt.db.write(async (tx) => {
    await tx.run("UPDATE contacts SET updated_at = ? WHERE id = ?", [tenYears, wrong]);
    await tx.run("UPDATE contacts SET updated_at = ? WHERE id = ?", [twoMinutes, fast]);
  });

  // Restarted with the clock right: the stamp 2 minutes ahead is followed, the one ten years ahead is not.
  const lines: string[] = [];
  const app = await reopen(lines);
  const made: string[] = [];
  for (let i = 0; i < 3; i++) made.push((await call(app, "POST", "/public/v1/contacts", { first_name: `After ${i}` })).body.data.created_at);
  expect(made).toEqual(made.map(() => new Date(twoMinutes).toISOString()));
  expect(lines.map((line) => JSON.parse(line)).map(({ time, level, msg, ahead_ms, ...fields }) => ({ level, msg, ...fields, ahead: ahead_ms > 60_000 }))).toEqual([
    {
      level: "warn",
      msg: "a change stamp stored more than a day ahead of this clock is not followed: a clock that was wrong wrote it, and changes are stamped below it from now on; correct it and have pollers start again (Keeping another system in step, in the README)",
      table: "contacts",
      column: "updated_at",
      stamp: new Date(tenYears).toISOString(),
      ahead: true,
    },
    {
      level: "warn",
      msg: "changes are stamped ahead of this clock, at a later time it showed before it was stepped back or a stamp stored, until it catches up",
      stamp: new Date(twoMinutes).toISOString(),
      from: "contacts.updated_at",
      ahead: true,
    },
  ]);
});

test("a change of a record stamped later by a clock ahead (another instance's) keeps that updated_at, and its event's timestamp is that updated_at, set-wise changes' too", async () => {
  const aheadBy = 3_000;
  const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Stamped ahead" } })).body.data.id as string;
  const doomed = (await h.json("POST", "/public/v1/accounts", { body: { name: "Deleted" } })).body.data.id as string;
  const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Stamped ahead" } })).body.data.id as string;
  const linked = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Linked", account_ids: [doomed] } })).body.data.id as string;
  // Another instance, its clock 3 s ahead of this one's (within the 4 s the README allows), stamped them last.
  const ahead = Date.now() + aheadBy;
  await h.rt.db.write(async (tx) => {
    await tx.run("UPDATE accounts SET updated_at = ? WHERE id = ?", [ahead, account]);
    await tx.run("UPDATE contacts SET updated_at = ? WHERE id IN (?, ?)", [ahead, contact, linked]);
  });
  expect((await h.json("PATCH", `/public/v1/accounts/${account}`, { body: { name: "Renamed" } })).status).toBe(200);
  expect((await h.json("PATCH", `/public/v1/contacts/${contact}`, { body: { first_name: "Renamed" } })).status).toBe(200);
  expect((await h.json("DELETE", `/public/v1/accounts/${doomed}`)).status).toBe(204);
  const events = await h.rt.db.all<{ payload: string }>("SELECT payload FROM events WHERE subject_id IN (?, ?, ?) AND type IN ('account.updated', 'contact.updated') ORDER BY subject_id", [account, contact, linked]);
  const stamped = new Date(ahead).toISOString();
  expect(events.map(({ payload }) => JSON.parse(payload)).map(({ type, timestamp, data }) => ({ type, id: data.id, timestamp, updated_at: data.updated_at }))).toEqual(
    [
      { type: "account.updated", id: account, timestamp: stamped, updated_at: stamped },
      { type: "contact.updated", id: contact, timestamp: stamped, updated_at: stamped },
      { type: "contact.updated", id: linked, timestamp: stamped, updated_at: stamped },
    ].sort((a, b) => (a.id < b.id ? -1 : 1)),
  );
});
