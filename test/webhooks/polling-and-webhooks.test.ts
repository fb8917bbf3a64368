import { afterEach, expect, test } from "bun:test";
import { startReceiver, waitFor, webhookHarness, type Receiver, type WebhookHarness } from "./support.ts";

// One copy kept by both of the README's recipes: the receiver of "Order and duplicates" (an event
// is applied when its data.version is above the version stored, 0 when unknown) and the poller of
// "Keeping another system in step" (which marks each id of the deleted list deleted, with the
// tombstone's version). A delivery retried after the poller found the deletion must not bring the
// contact back: nothing lists it again (ids are never reused).

let h: WebhookHarness;
let r: Receiver;
afterEach(async () => {
  await h.shutdown();
  await r.stop();
});

type Held = { kind: "live"; contact: { id: string; version: number } } | { kind: "deleted"; version: number };

/** Mirror is the integration's own store: contacts, and the marks of deleted ones. */
class Mirror {
  readonly rows = new Map<string, Held>();
  readonly seen = new Set<string>();
  updatedSince: string | null = null;
  deletedSince: string | null = null;

  version(id: string): number {
    const held = this.rows.get(id);
    return held === undefined ? 0 : held.kind === "live" ? held.contact.version : held.version;
  }

  /** onEvent is the README's receiver. */
  onEvent(event: { type: string; event_id: string; data: { id: string; version: number } }) {
    if (this.seen.has(event.event_id)) return;
    const [kind, change] = event.type.split(".");
    if (kind === "contact" && event.data.version > this.version(event.data.id)) {
      this.rows.set(event.data.id, change === "deleted" ? { kind: "deleted", version: event.data.version } : { kind: "live", contact: event.data });
    }
    this.seen.add(event.event_id);
  }

  async readAll(path: string): Promise<any[]> {
    const rows: any[] = [];
    let cursor: string | null = null;
    do {
      const res: any = await h.json("GET", `${path}${path.includes("?") ? "&" : "?"}per_page=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      expect(res.status).toBe(200);
      rows.push(...res.body.data);
      cursor = res.body.meta.next_cursor;
    } while (cursor);
    return rows;
  }

  /** round is the README's poller (its first run when it has none): changes, then deletions. */
  async round() {
    const started = new Date(Date.now() - 1).toISOString();
    const changed = this.updatedSince === null
      ? await this.readAll("/public/v1/contacts?sort_by=created_at&sort_direction=asc")
      : await this.readAll(`/public/v1/contacts?updated_after=${encodeURIComponent(this.updatedSince)}&sort_by=updated_at&sort_direction=asc`);
    for (const contact of changed) if (contact.version > this.version(contact.id)) this.rows.set(contact.id, { kind: "live", contact });
    const deleted = await this.readAll(`/public/v1/contacts/deleted${this.deletedSince === null ? "" : `?since=${encodeURIComponent(this.deletedSince)}`}`);
    for (const tombstone of deleted) this.rows.set(tombstone.id, { kind: "deleted", version: tombstone.version });
    // no overlap is needed here: one instance, and nothing runs between the rounds but the receiver
    this.updatedSince = this.deletedSince = started;
  }

  live(): string[] {
    return [...this.rows].filter(([, held]) => held.kind === "live").map(([id]) => id).sort();
  }
}

test("a contact.updated retried after the poller found the contact's tombstone is dropped: the tombstone carries contact.deleted's version", async () => {
  h = await webhookHarness({ retrySchedule: [0.02], deliveryTimeoutMs: 60_000 });
  r = startReceiver();
  const mirror = new Mirror();
  let refused = false;
  let polled = () => {};
  const afterRound = new Promise<void>((resolve) => (polled = resolve));
  r.respond(async (got) => {
    if (got.json.type === "contact.updated") {
      // the first attempt fails; its retry arrives only after the poller's round
      if (!refused) return (refused = true), new Response("busy", { status: 503 });
      await afterRound;
    }
    mirror.onEvent(got.json);
    return new Response(null, { status: 204 });
  });
  // deletions are left to the poller: the webhooks are a hint
  await h.subscribe(r.url, ["contact.created", "contact.updated"]);
  await mirror.round();

  const c = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data;
  await waitFor(() => mirror.version(c.id) === 1, "contact.created");
  expect((await h.json("PATCH", `/public/v1/contacts/${c.id}`, { body: { last_name: "Lovelace" } })).status).toBe(200);
  expect((await h.request("DELETE", `/public/v1/contacts/${c.id}`)).status).toBe(204);
  await waitFor(() => r.received.filter((got) => got.json.type === "contact.updated").length === 2, "the retry of contact.updated");
  await mirror.round();
  expect(mirror.rows.get(c.id)).toEqual({ kind: "deleted", version: 3 });
  polled();
  await waitFor(async () => (await h.deliveries()).every((d) => d.status === "succeeded"), "the retry answered");

  await mirror.round();
  expect(mirror.rows.get(c.id)).toEqual({ kind: "deleted", version: 3 });
  const truth = (await mirror.readAll("/public/v1/contacts?sort_by=created_at&sort_direction=asc")).map((contact) => contact.id).sort();
  expect([mirror.live(), truth]).toEqual([[], []]);
});
