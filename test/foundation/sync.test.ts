import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { listDeletedPage } from "../../server/tombstones/service.ts";
import { DAY_MS, HOUR_MS } from "../../server/shared/time.ts";
import { createUser } from "../../server/users/service.ts";
import { pruneHistory } from "../../server/webhooks/retention.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { random } from "../support/random.ts";
import { waitFor } from "../webhooks/support.ts";
import { validation } from "./support.ts";

// The README's sync recipe ("Keeping another system in step") run against random concurrent
// writers: a second store, a plain map, polled in step through updated_after and the deleted list.

let h: Harness;
beforeEach(async () => {
  h = await createHarness({ rateReadBurst: 1_000_000, rateReadPerSecond: 1_000_000, rateWriteBurst: 1_000_000, rateWritePerSecond: 1_000_000 });
});
afterEach(async () => await h.close());

// The README says 5 s, which would reread the whole of this short test and hide a missed change.
// 1 ms is what one process needs: a change committed after a read carries that millisecond or a later one.
const OVERLAP_MS = 1;
// A round that lists no deletion moves the deleted list's since to the round's start minus this
// (the README's 5 s): a deletion stamped before the round may commit after its read.
const NO_DELETION_OVERLAP_MS = 1_000;
const TAGS = ["vip", "lead", "customer", "churned", "a/b c"];

/** Poller keeps a map of contacts in step with the API, as the README's recipe says. */
class Poller {
  readonly copy = new Map<string, any>();
  updatedSince: string | null = null;
  deletedSince: string | null = null;
  resyncs = 0;

  async readAll(path: string): Promise<any[]> {
    const rows: any[] = [];
    let cursor: string | null = null;
    do {
      const res: any = await h.json("GET", `${path}${path.includes("?") ? "&" : "?"}per_page=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      if (res.status !== 200) return Promise.reject(Object.assign(new Error(`${path}: ${res.status}`), { response: res }));
      rows.push(...res.body.data);
      cursor = res.body.meta.next_cursor;
    } while (cursor);
    return rows;
  }

  /** resync replaces the copy with a full read (first run, or after a gap longer than the tombstones are kept). */
  async resync() {
    this.resyncs++;
    const started = new Date(Date.now() - OVERLAP_MS).toISOString();
    const all = await this.readAll("/public/v1/contacts?sort_by=created_at&sort_direction=asc");
    this.copy.clear();
    for (const contact of all) this.copy.set(contact.id, contact);
    this.updatedSince = started;
    this.deletedSince = started;
  }

  /** round reads what changed, then what was deleted, since the last round (minus an overlap). */
  async round() {
    if (this.updatedSince === null) return this.resync();
    const started = Date.now();
    const changed = await this.readAll(`/public/v1/contacts?updated_after=${encodeURIComponent(this.updatedSince)}&sort_by=updated_at&sort_direction=asc`);
    let newest = Date.parse(this.updatedSince) + OVERLAP_MS;
    for (const contact of changed) {
      const held = this.copy.get(contact.id);
      if (!held || held.version <= contact.version) this.copy.set(contact.id, contact);
      newest = Math.max(newest, Date.parse(contact.updated_at));
    }
    this.updatedSince = new Date(newest - OVERLAP_MS).toISOString();
    let deleted: any[];
    try {
      deleted = await this.readAll(`/public/v1/contacts/deleted?since=${encodeURIComponent(this.deletedSince!)}`);
    } catch (error) {
      if ((error as { response?: { status: number } }).response?.status === 410) return this.resync();
      throw error;
    }
    let newestDeletion = Date.parse(this.deletedSince!) + OVERLAP_MS;
    for (const tombstone of deleted) {
      this.copy.delete(tombstone.id);
      newestDeletion = Math.max(newestDeletion, Date.parse(tombstone.deleted_at));
    }
    this.deletedSince = new Date(deleted.length > 0 ? newestDeletion - OVERLAP_MS : started - NO_DELETION_OVERLAP_MS).toISOString();
  }
}

/** writer makes `steps` random changes: creates, PATCHes, relation changes, deletes, account deletions. */
async function writer(seed: number, steps: number, accounts: string[], users: string[]) {
  const rnd = random(seed);
  const mine: string[] = [];
  for (let step = 0; step < steps; step++) {
    const roll = rnd.next();
    const target = mine.length ? rnd.pick(mine) : null;
    if (!target || roll < 0.25) {
      const res = await h.json("POST", "/public/v1/contacts", {
        body: { first_name: `W${seed}-${step}`, email: rnd.next() < 0.5 ? `w${seed}.${step}@example.com` : null, tags: [rnd.pick(TAGS)], account_ids: rnd.next() < 0.5 ? [rnd.pick(accounts)] : [], assigned_user_id: rnd.pick([...users, null]) },
      });
      if (res.status === 201) mine.push(res.body.data.id);
      continue;
    }
    if (roll < 0.4) await h.json("PATCH", `/public/v1/contacts/${target}`, { body: { last_name: `L${rnd.int(1000)}`, phone: rnd.next() < 0.5 ? null : `+1 555 ${rnd.int(10000)}`, custom_fields: { n: rnd.int(100) } } });
    else if (roll < 0.55) await h.json("POST", `/public/v1/contacts/${target}/accounts`, { body: { account_id: rnd.pick(accounts) } });
    else if (roll < 0.65) await h.json("DELETE", `/public/v1/contacts/${target}/accounts/${rnd.pick(accounts)}`);
    else if (roll < 0.78) await h.json("POST", `/public/v1/contacts/${target}/tags`, { body: { tag: rnd.pick(TAGS) } });
    else if (roll < 0.88) await h.json("DELETE", `/public/v1/contacts/${target}/tags/${encodeURIComponent(rnd.pick(TAGS))}`);
    else if (roll < 0.985) {
      await h.request("DELETE", `/public/v1/contacts/${target}`);
      mine.splice(mine.indexOf(target), 1);
    } else {
      // deleting an account changes every contact linked to it; a new one takes its place
      const gone = rnd.pick(accounts);
      await h.request("DELETE", `/public/v1/accounts/${gone}`);
      accounts.splice(accounts.indexOf(gone), 1, (await h.json("POST", "/public/v1/accounts", { body: { name: `Replacement ${seed}-${step}` } })).body.data.id);
    }
    // let the poller in between some writes
    if (rnd.next() < 0.3) await Bun.sleep(0);
  }
}

async function setUp() {
  const accounts: string[] = [];
  for (let i = 0; i < 6; i++) accounts.push((await h.json("POST", "/public/v1/accounts", { body: { name: `Account ${i}` } })).body.data.id);
  const users = [(await createUser(h.rt.db, { name: "U1", email: "u1@example.com" })).id, (await createUser(h.rt.db, { name: "U2", email: "u2@example.com" })).id];
  // some contacts exist before the sync starts
  await writer(99, 20, accounts, users);
  return { accounts, users };
}

/** pollWhile runs rounds until `done` settles, pausing `pauseMs` between them. */
async function pollWhile(poller: Poller, done: Promise<unknown>, pauseMs: number) {
  let finished = false;
  void done.then(() => (finished = true));
  while (!finished) {
    await poller.round();
    await Bun.sleep(pauseMs);
  }
}

async function expectInStep(poller: Poller) {
  await poller.round();
  const truth = await poller.readAll("/public/v1/contacts?sort_by=created_at&sort_direction=asc");
  expect(truth.length).toBeGreaterThan(10);
  expect(Object.fromEntries(poller.copy)).toEqual(Object.fromEntries(truth.map((c) => [c.id, c])));
}

describe("two-way sync by polling", () => {
  test("random concurrent writers; a poller following updated_after and the deleted list ends equal to the API", async () => {
    const { accounts, users } = await setUp();
    const poller = new Poller();
    const writers = Promise.all([1, 2, 3, 4].map((seed) => writer(seed, 60, [...accounts], users)));
    await pollWhile(poller, writers, 1);
    await writers;
    await expectInStep(poller);
    expect(poller.resyncs).toBe(1);
    // deletions happened and were followed
    expect((await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM tombstones WHERE resource = 'contact'"))!.n).toBeGreaterThan(5);
  });

  test("the poller stopped for a while in the middle catches up from where it stopped", async () => {
    const { accounts, users } = await setUp();
    const poller = new Poller();
    const first = Promise.all([1, 2].map((seed) => writer(seed, 40, [...accounts], users)));
    await pollWhile(poller, first, 1);
    await first;
    const stoppedAt = { updated: poller.updatedSince, deleted: poller.deletedSince };
    // down: writers go on, nobody polls
    await Promise.all([3, 4, 5].map((seed) => writer(seed, 60, [...accounts], users)));
    expect({ updated: poller.updatedSince, deleted: poller.deletedSince }).toEqual(stoppedAt);
    const last = Promise.all([6, 7].map((seed) => writer(seed, 40, [...accounts], users)));
    await pollWhile(poller, last, 1);
    await last;
    await expectInStep(poller);
    expect(poller.resyncs).toBe(1);
  });

  test("a poller that reads no deletion for longer than the tombstones are kept is not sent into a resync: each round moves its since on", async () => {
    await setUp();
    const poller = new Poller();
    await poller.round();
    // as if it had polled for 80 days with nothing deleted
    poller.deletedSince = new Date(Date.now() - 80 * DAY_MS).toISOString();
    await poller.round();
    const twentyDaysOn = await listDeletedPage(h.rt, "contact", { since: poller.deletedSince }, Date.now() + 20 * DAY_MS);
    expect([twentyDaysOn.data, poller.resyncs]).toEqual([[], 1]);
  });

  test("a poller away longer than the tombstones are kept gets 410 and resyncs in full, dropping what was deleted meanwhile", async () => {
    const { accounts, users } = await setUp();
    const poller = new Poller();
    await poller.round();
    // as if it had stopped 100 days ago, holding a contact deleted since then
    const ghost = [...poller.copy.values()][0];
    await h.request("DELETE", `/public/v1/contacts/${ghost.id}`);
    const longAgo = new Date(Date.now() - 100 * 86_400_000).toISOString();
    poller.updatedSince = longAgo;
    poller.deletedSince = longAgo;
    await writer(5, 40, [...accounts], users);
    await expectInStep(poller);
    expect(poller.copy.has(ghost.id)).toBe(false);
    expect(poller.resyncs).toBe(2);
  });
});

describe("the deleted lists' 410 follows what was pruned", () => {
  test("a since before deletions another instance pruned, keeping tombstones fewer days, is 410, though this one keeps them 90 days; the deleted list of the other resource is not affected", async () => {
    const now = Date.now();
    const gone = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Gone" } })).body.data;
    expect((await h.request("DELETE", `/public/v1/contacts/${gone.id}`)).status).toBe(204);
    // deleted 20 days ago (the clock cannot be moved back here)
    const deletedAt = now - 20 * DAY_MS;
    await h.rt.db.write((tx) => tx.run("UPDATE tombstones SET deleted_at = ? WHERE id = ?", [deletedAt, gone.id]));
    const deletedSince = (days: number, resource = "contacts") => h.json("GET", `/public/v1/${resource}/deleted?since=${new Date(now - days * DAY_MS).toISOString()}`);
    expect((await deletedSince(30)).body.data.map((t: { id: string }) => t.id)).toEqual([gone.id]);

    // an instance on the same database started with --tombstone-retention-days 7 (or this one, before the retention was raised)
    expect(await pruneHistory({ ...h.rt, config: { ...h.rt.config, tombstoneRetentionDays: 7 } }, now)).toMatchObject({ tombstones: 1 });

    const retained = new Date(deletedAt).toISOString();
    const expired = await deletedSince(30);
    expect([expired.status, expired.body]).toEqual([
      410,
      {
        type: "urn:crm:problem:deletions-expired",
        title: "Gone",
        status: 410,
        detail: `Deletions up to ${retained} may have been pruned (tombstones were kept for fewer days than the 90 now set). List every contact to resync, then poll from the time the resync started.`,
        errors: [{ parameter: "since", detail: `must be ${retained} or later` }],
        retained_since: retained,
      },
    ]);
    // a since at or after the newest deletion pruned misses nothing
    expect((await deletedSince(20)).body).toEqual({ data: [], meta: { current_page: 1, last_page: 1, per_page: 25, total: 0, next_cursor: null } });
    expect((await deletedSince(30, "accounts")).status).toBe(200);
  });
});

describe("the deleted lists' retained_since stays accepted", () => {
  test("the retained_since a 410 gives, sent back as since, is answered 200 on contacts, accounts and users; a millisecond before it is still 410", async () => {
    // The horizon is whole hours: a boundary passing between the two requests would move it on, rightly.
    await waitFor(() => Date.now() % HOUR_MS < HOUR_MS - 10_000, "10 s clear of the next hour", 30_000);
    const old = new Date(Date.now() - 91 * DAY_MS).toISOString();
    for (const resource of ["contacts", "accounts", "users"]) {
      const expired = await h.json("GET", `/public/v1/${resource}/deleted?since=${old}`);
      const retained: string = expired.body.retained_since;
      expect([resource, expired.status, expired.body.errors]).toEqual([resource, 410, [{ parameter: "since", detail: `must be ${retained} or later` }]]);
      await Bun.sleep(5);
      const again = await h.json("GET", `/public/v1/${resource}/deleted?since=${retained}`);
      expect([resource, again.status, again.body.data]).toEqual([resource, 200, []]);
      const before = await h.json("GET", `/public/v1/${resource}/deleted?since=${new Date(Date.parse(retained) - 1).toISOString()}`);
      expect([resource, before.status, before.body.retained_since]).toEqual([resource, 410, retained]);
    }
  });
});

describe("the deleted lists' cursors", () => {
  test("a next_cursor of one deleted list is 422 on the other two (they share their one filter, since: such a cursor cut the list at its own position, answering 200 with deletions skipped), and pages on its own", async () => {
    const since = new Date(Date.now() - 60_000).toISOString();
    for (let i = 0; i < 2; i++) {
      const made = [
        ["contacts", (await h.json("POST", "/public/v1/contacts", { body: { first_name: `Gone ${i}` } })).body.data.id],
        ["accounts", (await h.json("POST", "/public/v1/accounts", { body: { name: `Gone ${i}` } })).body.data.id],
        ["users", (await h.json("POST", "/public/v1/users", { body: { name: `Gone ${i}`, email: `gone${i}@example.com` } })).body.data.id],
      ];
      for (const [resource, id] of made) expect([resource, (await h.request("DELETE", `/public/v1/${resource}/${id}`)).status]).toEqual([resource, 204]);
    }
    const lists = ["contacts", "accounts", "users"];
    const page = (resource: string, cursor = "") => h.json("GET", `/public/v1/${resource}/deleted?since=${encodeURIComponent(since)}&per_page=1${cursor && `&cursor=${encodeURIComponent(cursor)}`}`);
    const cursors = new Map<string, string>();
    for (const resource of lists) cursors.set(resource, (await page(resource)).body.meta.next_cursor);
    const answers = [];
    for (const from of lists) {
      for (const to of lists) {
        const res = await page(to, cursors.get(from));
        answers.push({ from, to, status: res.status, body: from === to ? res.body.meta : res.body });
      }
    }
    const notOurs = validation([{ parameter: "cursor", detail: "is not a cursor from meta.next_cursor of this same list (same sort and filters), or is one from before the service was upgraded or its key replaced: read the list again from its first page" }]);
    const own = { current_page: 0, last_page: 2, per_page: 1, total: 2, next_cursor: null };
    expect(answers).toEqual(lists.flatMap((from) => lists.map((to) => (from === to ? { from, to, status: 200, body: own } : { from, to, status: 422, body: notOurs }))));
  });
});

describe("updated_at never goes back, and never runs ahead of the clock", () => {
  /** stampedAhead sets a row's updated_at 10 s ahead, as an instance whose clock runs ahead would stamp it. */
  async function stampedAhead(table: "contacts" | "accounts" | "users", id: string): Promise<number> {
    const ahead = Date.now() + 10_000;
    await h.rt.db.write((tx) => tx.run(`UPDATE ${table} SET updated_at = ? WHERE id = ?`, [ahead, id]));
    return ahead;
  }

  test("a change made on a clock behind the last one's keeps the last stamp: a contact's PATCH, an account's PATCH, the unlink of a deleted account, a user's PATCH", async () => {
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data;
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", account_ids: [account.id] } })).body.data;

    const contactAhead = await stampedAhead("contacts", contact.id);
    const patched = (await h.json("PATCH", `/public/v1/contacts/${contact.id}`, { body: { first_name: "Grace" } })).body.data;
    expect([patched.version, Date.parse(patched.updated_at)]).toEqual([contact.version + 1, contactAhead]);

    const accountAhead = await stampedAhead("accounts", account.id);
    const renamed = (await h.json("PATCH", `/public/v1/accounts/${account.id}`, { body: { name: "Acme Ltd" } })).body.data;
    expect([renamed.version, Date.parse(renamed.updated_at)]).toEqual([account.version + 1, accountAhead]);

    const linkedAhead = await stampedAhead("contacts", contact.id);
    expect((await h.request("DELETE", `/public/v1/accounts/${account.id}`)).status).toBe(204);
    const unlinked = (await h.json("GET", `/public/v1/contacts/${contact.id}`)).body.data;
    expect([unlinked.version, unlinked.account_ids, Date.parse(unlinked.updated_at)]).toEqual([patched.version + 1, [], linkedAhead]);

    const user = await createUser(h.rt.db, { name: "Grace", email: "grace@example.com" });
    const userAhead = await stampedAhead("users", user.id);
    const renamedUser = (await h.json("PATCH", `/public/v1/users/${user.id}`, { body: { name: "Grace Hopper" } })).body.data;
    expect([renamedUser.name, Date.parse(renamedUser.updated_at)]).toEqual(["Grace Hopper", userAhead]);
  });

  test("a record changed many times in one batch keeps the batch's one stamp, so a poller's next updated_after still finds another contact changed just after", async () => {
    const contacts = Array.from({ length: 100 }, (_, n) => ({ email: "hot@example.com", custom_fields: { n } }));
    const accounts = Array.from({ length: 100 }, (_, n) => ({ name: "Acme", properties: { n } }));
    const hot = (await h.json("POST", "/public/v1/contacts/batch", { body: { items: contacts } })).body.data;
    const busy = (await h.json("POST", "/public/v1/accounts/batch", { body: { items: accounts } })).body.data;
    const contact = (await h.json("GET", `/public/v1/contacts/${hot[99].id}`)).body.data;
    const account = (await h.json("GET", `/public/v1/accounts/${busy[99].id}`)).body.data;
    expect([contact.version, contact.updated_at, account.version, account.updated_at]).toEqual([100, contact.created_at, 100, account.created_at]);
    const other = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Grace" } })).body.data;
    const since = new Date(Date.parse(contact.updated_at) - 1).toISOString();
    const changed = (await h.json("GET", `/public/v1/contacts?updated_after=${encodeURIComponent(since)}&sort_by=updated_at&sort_direction=asc`)).body.data;
    expect(changed.map((c: { id: string }) => c.id)).toEqual([contact.id, other.id]);
  });
});
