import { describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { waitFor, webhookTestScope, type Receiver, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
const receiver = scope.receiver;
let h: WebhookHarness;

/** verifiedEvents checks each delivery's signature and event id and returns the events without their ids. */
function verifiedEvents(r: Receiver, secret: string) {
  const verifier = new Webhook(secret);
  return r.received.map((got) => {
    const { event_id, ...event } = verifier.verify(got.body, got.headers) as { type: string; event_id: string; timestamp: string; data: any };
    expect(event_id).toMatch(/^evt_[0-9A-Z]{26}$/);
    return event;
  });
}

describe("account and relation events: happy paths", () => {
  test("account.created, account.updated, the contact.updated of a link and of an account's deletion, and account.deleted reach a receiver, signed, with whole bodies", async () => {
    h = await scope.harness();
    const r = receiver();
    const sub = await h.subscribe(r.url, ["account.created", "account.updated", "account.deleted", "contact.updated"]);
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme", domain: "acme.test" } })).body.data;
    const renamed = (await h.json("PATCH", `/public/v1/accounts/${account.id}`, { body: { name: "Acme Corp" } })).body.data;
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).body.data;
    const linked = (await h.json("POST", `/public/v1/contacts/${contact.id}/accounts`, { body: { account_id: account.id } })).body.data;
    expect((await h.request("DELETE", `/public/v1/accounts/${account.id}`)).status).toBe(204);
    const unlinked = (await h.json("GET", `/public/v1/contacts/${contact.id}`)).body.data;
    await waitFor(() => r.received.length === 5, "five deliveries");
    const events = verifiedEvents(r, sub.secret);
    // order between deliveries is not guaranteed: compare by kind and subject
    const key = (e: { type: string; data: any }) => `${e.type} ${e.data.updated_at ?? e.data.deleted_at}`;
    const deletedAt = events.find((e) => e.type === "account.deleted")!.data.deleted_at;
    expect(events.sort((a, b) => key(a).localeCompare(key(b)))).toEqual(
      [
        { type: "account.created", timestamp: account.created_at, data: account },
        { type: "account.updated", timestamp: renamed.updated_at, data: renamed },
        { type: "contact.updated", timestamp: linked.updated_at, data: linked },
        { type: "contact.updated", timestamp: unlinked.updated_at, data: unlinked },
        { type: "account.deleted", timestamp: deletedAt, data: { id: account.id, version: 3, deleted_at: deletedAt } },
      ].sort((a, b) => key(a).localeCompare(key(b))),
    );
    expect(unlinked.account_ids).toEqual([]);
    expect(unlinked.updated_at).toBe(deletedAt);
    // each change of the contact counted its version up: created 1, linked 2, unlinked by the deletion 3
    expect([contact.version, linked.version, unlinked.version]).toEqual([1, 2, 3]);
    // and the account's: created 1, renamed 2, deleted 3
    expect([account.version, renamed.version]).toEqual([1, 2]);
  });

  test("deleting a user sends, for each contact assigned to it, a contact.updated with the contact without the user, signed, with whole bodies; users themselves send no event", async () => {
    h = await scope.harness();
    const r = receiver();
    const sub = await h.subscribe(r.url, ["contact.updated"]);
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@example.com" } })).body.data;
    const alan = (await h.json("POST", "/public/v1/users", { body: { name: "Alan", email: "alan@example.com" } })).body.data;
    const owned = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", assigned_user_id: grace.id } })).body.data;
    const shared = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Bob", assigned_user_id: alan.id, assigned_user_ids: [grace.id, alan.id] } })).body.data;
    await h.json("POST", "/public/v1/contacts", { body: { first_name: "Cy", assigned_user_id: alan.id } });
    expect((await h.request("DELETE", `/public/v1/users/${grace.id}`)).status).toBe(204);
    const ownedAfter = (await h.json("GET", `/public/v1/contacts/${owned.id}`)).body.data;
    const sharedAfter = (await h.json("GET", `/public/v1/contacts/${shared.id}`)).body.data;
    expect([ownedAfter, sharedAfter]).toEqual([
      { ...owned, assigned_user_id: null, version: 2, updated_at: ownedAfter.updated_at },
      { ...shared, assigned_user_ids: [alan.id], version: 2, updated_at: ownedAfter.updated_at },
    ]);
    await waitFor(() => r.received.length === 2, "two deliveries");
    const events = verifiedEvents(r, sub.secret);
    // order between deliveries is not guaranteed
    expect(events.sort((a, b) => a.data.id.localeCompare(b.data.id))).toEqual(
      [ownedAfter, sharedAfter].map((data) => ({ type: "contact.updated", timestamp: ownedAfter.updated_at, data })).sort((a, b) => a.data.id.localeCompare(b.data.id)),
    );
    expect((await h.rt.db.all<{ type: string }>("SELECT type FROM events ORDER BY created_at, id")).map((e) => e.type)).toEqual(["contact.created", "contact.created", "contact.created", "contact.updated", "contact.updated"]);
  });

  test("deleting an account linked to more contacts than one statement stores (1,001) records one contact.updated per contact, with one delivery per subscription", async () => {
    h = await scope.harness();
    const subscriptions = [await h.subscribe(receiver().url, ["contact.updated"]), await h.subscribe(receiver().url, ["contact.updated"])];
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data;
    const contactIds: string[] = [];
    for (let from = 0; from < 1001; from += 100) {
      const items = Array.from({ length: Math.min(100, 1001 - from) }, (_, i) => ({ email: `c${from + i}@example.com`, account_ids: [account.id] }));
      const res = await h.json("POST", "/public/v1/contacts/batch", { body: { items } });
      expect(res.status).toBe(200);
      contactIds.push(...res.body.data.map((result: { status: string; id: string }) => result.id));
    }
    expect((await h.request("DELETE", `/public/v1/accounts/${account.id}`)).status).toBe(204);
    const eventsOf = new Map<string, string[]>();
    for (const subscription of subscriptions) {
      let cursor: string | null = null;
      do {
        const page: { body: { data: { event_id: string }[]; meta: { next_cursor: string | null } } } = await h.json("GET", `/public/v1/webhook-deliveries?subscription_id=${subscription.id}&event=contact.updated&per_page=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
        for (const delivery of page.body.data) eventsOf.set(delivery.event_id, [...(eventsOf.get(delivery.event_id) ?? []), subscription.id]);
        cursor = page.body.meta.next_cursor;
      } while (cursor);
    }
    const subjects = new Set<string>();
    for (const eventId of eventsOf.keys()) subjects.add(JSON.parse((await h.rt.db.get<{ payload: string }>("SELECT payload FROM events WHERE id = ?", [eventId]))!.payload).data.id);
    expect({ events: eventsOf.size, deliveriesPerEvent: new Set([...eventsOf.values()].map((ids) => ids.sort().join(","))), subjects: subjects.size }).toEqual({
      events: 1001,
      deliveriesPerEvent: new Set([subscriptions.map((s) => s.id).sort().join(",")]),
      subjects: 1001,
    });
    expect([...subjects].sort()).toEqual([...contactIds].sort());
  }, 60_000);
});
