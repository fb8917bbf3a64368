import { describe, expect, test } from "bun:test";
import { newId } from "../../server/shared/ids.ts";
import { expectProblem, ISO } from "../foundation/support.ts";
import { tablesHolding } from "../support/personal-data.ts";
import { settledDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

const scope = webhookTestScope();
const KINDS = ["contact.created", "contact.updated", "contact.deleted"];
const EMAIL = "erin.erase9@example.com";
const SURNAME = "Erasemk9";
const PHONE = "+15550009999";

/** makeErasedHistory creates a contact, changes it four times (five events), and deletes it. */
async function makeDeletedContact(h: WebhookHarness): Promise<string> {
  const c = (await h.json("POST", "/public/v1/contacts", { body: { email: EMAIL, first_name: "Erin", last_name: SURNAME, phone: PHONE } })).body.data;
  for (const first_name of ["Erin2", "Erin3", "Erin4", "Erin5"]) expect((await h.json("PATCH", `/public/v1/contacts/${c.id}`, { body: { first_name } })).status).toBe(200);
  return c.id;
}

const erase = (h: WebhookHarness, path: string, headers: Record<string, string> = {}) => h.json("POST", `/public/v1/${path}/erase`, { headers });

describe("erasing a deleted contact's earlier events", () => {
  test("leaves nothing of the person in any table, fails the paused subscription's backlog, which sends only contact.deleted on resume, and is refused on retry and skipped by recovery; two writes of 2 events and a last one", async () => {
    const h = await scope.harness({}, { batchRows: 2 });
    const live = scope.receiver();
    const parked = scope.receiver();
    // The receiver answers with what it was sent, in its body and a header, as real ones do.
    live.respond((request) => new Response(`stored ${request.json?.data?.email}`, { headers: { location: `https://receiver.example/people/${request.json?.data?.email}` } }));
    const a = await h.subscribe(live.url, KINDS);
    const b = await h.subscribe(parked.url, KINDS);
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${b.id}/pause`)).status).toBe(200);
    const id = await makeDeletedContact(h);
    await waitFor(() => live.received.length === 5, "the five events at the live receiver");
    await settledDeliveries(h, `subscription_id=${a.id}`);
    expect((await h.request("DELETE", `/public/v1/contacts/${id}`)).status).toBe(204);
    await waitFor(() => live.received.length === 6, "contact.deleted at the live receiver");
    const before = await tablesHolding(h.rt.db, [EMAIL]);
    expect(Object.keys(before[EMAIL]!).sort()).toEqual(["events", "tombstones", "webhook_delivery_attempts", "webhook_header_sets"]);

    const res = await erase(h, `contacts/deleted/${id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: { id, events_erased: 5, deliveries_failed: 5 } });
    expect(await tablesHolding(h.rt.db, [EMAIL, SURNAME, PHONE, "Erin"])).toEqual({ [EMAIL]: {}, [SURNAME]: {}, [PHONE]: {}, Erin: {} });

    const shown = (await h.deliveries(`subscription_id=${a.id}&per_page=100`)).filter((d: any) => d.event_type !== "contact.deleted");
    expect(shown.length).toBe(5);
    for (const d of shown) {
      const detail = await h.delivery(d.id);
      expect(detail.status).toBe("succeeded");
      expect(detail.payload).toBeNull();
      expect(detail.payload_erased_at).toMatch(ISO);
      expect(detail.attempt_history.map((x: any) => [x.request_headers, x.response_status, x.response_body, x.response_headers])).toEqual([[null, 200, null, {}]]);
    }
    const deleted = (await h.deliveries(`subscription_id=${a.id}&event=contact.deleted`))[0];
    expect((await h.delivery(deleted.id)).payload_erased_at).toBeNull();

    const backlog = await h.deliveries(`subscription_id=${b.id}&per_page=100`);
    expect(backlog.map((d: any) => [d.event_type, d.status, /^not sent: its event's payload was erased at \S+, after the record was deleted$/.test(d.last_error ?? "")]).sort()).toEqual([
      ["contact.created", "failed", true],
      ["contact.deleted", "pending", false],
      ["contact.updated", "failed", true],
      ["contact.updated", "failed", true],
      ["contact.updated", "failed", true],
      ["contact.updated", "failed", true],
    ]);

    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${b.id}/resume`)).status).toBe(200);
    await settledDeliveries(h, `subscription_id=${b.id}`);
    expect(parked.received.map((r) => r.json)).toEqual([{ type: "contact.deleted", event_id: expect.any(String), timestamp: expect.stringMatching(ISO), data: { id, version: 6, deleted_at: expect.stringMatching(ISO) } }]);

    for (const d of [shown[0], backlog.find((x: any) => x.event_type === "contact.created")]) {
      const retry = await h.json("POST", `/public/v1/webhook-deliveries/${d.id}/retry`);
      expectProblem(retry, 409, "event-erased");
      expect(retry.body.detail).toMatch(/^The payload of this delivery's event was erased at \S+, after its record was deleted; nothing of it is left to send\.$/);
    }
    const since = new Date(Date.now() - 3_600_000).toISOString();
    const recovered = await h.json("POST", `/public/v1/webhook-subscriptions/${b.id}/recover`, { body: { since } });
    expect([recovered.status, recovered.body.data.queued]).toEqual([202, 0]);
    expect(parked.received.length).toBe(1);
  });

  test("is refused for a live record (someone else's included), an unknown id and another kind's id, and erases a deleted account's events", async () => {
    const h = await scope.harness();
    const r = scope.receiver();
    await h.subscribe(r.url, [...KINDS, "account.created"]);
    const other = (await h.json("POST", "/public/v1/contacts", { body: { email: "someone.else@example.com" } })).body.data;
    const refused = await erase(h, `contacts/deleted/${other.id}`);
    expectProblem(refused, 409, "record-not-deleted");
    expect(refused.body.detail).toBe(`The contact ${other.id} exists: only a deleted contact's events are erased. Delete it first (DELETE /public/v1/contacts/${other.id}), then erase them.`);
    const [created] = await settledDeliveries(h);
    expect((await h.delivery(created.id)).payload.data.email).toBe("someone.else@example.com");

    const unknown = newId("con");
    expectProblem(await erase(h, `contacts/deleted/${unknown}`), 404, "not-found");
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Erase Mk9 Ltd", domain: "erasemk9.example" } })).body.data;
    // Its account.created sent first: still pending at the erase (a busy machine), the erase fails it.
    await settledDeliveries(h);
    expectProblem(await erase(h, `accounts/deleted/${account.id}`), 409, "record-not-deleted");
    expect((await h.request("DELETE", `/public/v1/accounts/${account.id}`)).status).toBe(204);
    expectProblem(await erase(h, `contacts/deleted/${account.id}`), 404, "not-found");
    expectProblem(await erase(h, `accounts/deleted/${other.id}`), 404, "not-found");
    expect((await erase(h, `accounts/deleted/${account.id}`)).body).toEqual({ data: { id: account.id, events_erased: 1, deliveries_failed: 0 } });
    expect(await tablesHolding(h.rt.db, ["Erase Mk9", "erasemk9.example"])).toEqual({ "Erase Mk9": {}, "erasemk9.example": {} });
  });

  test("an attempt under way at the erasure is recorded without the receiver's answer, and its delivery is not retried", async () => {
    const h = await scope.harness({ deliveryTimeoutMs: 30_000 });
    const r = scope.receiver();
    r.respond((request) => new Response(`stored ${request.json?.data?.email}`, { status: 500, headers: { location: `https://receiver.example/people/${request.json?.data?.email}` } }));
    await h.subscribe(r.url, ["contact.created"]);
    r.hold();
    const c = (await h.json("POST", "/public/v1/contacts", { body: { email: EMAIL } })).body.data;
    await waitFor(() => r.received.length === 1, "the attempt to reach the receiver");
    expect((await h.request("DELETE", `/public/v1/contacts/${c.id}`)).status).toBe(204);
    expect((await erase(h, `contacts/deleted/${c.id}`)).body).toEqual({ data: { id: c.id, events_erased: 1, deliveries_failed: 1 } });
    r.release();
    const [d] = await waitFor(async () => {
      const list = await h.deliveries();
      return list[0]?.attempts === 1 && list;
    }, "the attempt to be recorded");
    const detail = await h.delivery(d.id);
    expect([detail.status, detail.next_attempt_at, detail.payload]).toEqual(["failed", null, null]);
    expect(detail.attempt_history.map((x: any) => [x.request_headers, x.response_status, x.response_body, x.response_headers])).toEqual([[null, 500, null, {}]]);
    const signature = r.received[0]!.headers["webhook-signature"]!;
    expect(await tablesHolding(h.rt.db, [EMAIL, signature])).toEqual({ [EMAIL]: {}, [signature]: {} });
  });

  test("drops the signatures and request headers of the erased events' attempts, and rewrites their errors that quoted a redirect's Location as new errors word it; another contact's keep theirs", async () => {
    const h = await scope.harness();
    const r = scope.receiver();
    // A receiver that moved, naming the person in its Location, as an earlier version quoted it in the error.
    r.respond((request) => new Response(null, { status: 308, headers: { location: `https://receiver.example/people/${request.json?.data?.email}` } }));
    await h.subscribe(r.url, ["contact.created"]);
    const gone = (await h.json("POST", "/public/v1/contacts", { body: { email: EMAIL } })).body.data;
    const other = (await h.json("POST", "/public/v1/contacts", { body: { email: "kept.mk9@example.com" } })).body.data;
    const settled = await settledDeliveries(h);
    const details = new Map<string, any>();
    for (const d of settled) details.set((await h.delivery(d.id)).payload.data.id, d);
    const [erased, kept] = [details.get(gone.id), details.get(other.id)];
    // The errors an earlier version (before session 35) recorded: the Location quoted.
    const quoted = (email: string) => `redirect to https://receiver.example/people/${email} not followed; point the subscription at the final URL`;
    await h.rt.db.write(async (tx) => {
      for (const [d, email] of [[erased, EMAIL], [kept, "kept.mk9@example.com"]] as const) {
        await tx.run("UPDATE webhook_delivery_attempts SET error = ? WHERE delivery_id = ?", [quoted(email), d.id]);
        await tx.run("UPDATE webhook_deliveries SET last_error = ? WHERE id = ?", [quoted(email), d.id]);
      }
    });
    const signatures = r.received.filter((x) => x.json?.data?.id === gone.id).map((x) => x.headers["webhook-signature"]!);
    expect(signatures.length).toBe(3);
    expect(Object.keys((await tablesHolding(h.rt.db, [signatures[0]!]))[signatures[0]!]!)).toEqual(["webhook_delivery_attempts"]);
    expect((await h.request("DELETE", `/public/v1/contacts/${gone.id}`)).status).toBe(204);
    expect((await erase(h, `contacts/deleted/${gone.id}`)).body).toEqual({ data: { id: gone.id, events_erased: 1, deliveries_failed: 0 } });

    const neutral = "redirect (308) not followed; point the subscription at the final URL, which the answer's Location header names";
    const detail = await h.delivery(erased.id);
    expect([detail.last_error, detail.payload, detail.payload_erased_at]).toEqual([neutral, null, expect.stringMatching(ISO)]);
    expect(detail.attempt_history.map((a: any) => [a.attempt, a.request_headers, a.response_status, a.response_headers, a.response_body, a.error])).toEqual([
      [1, null, 308, {}, null, neutral],
      [2, null, 308, {}, null, neutral],
      [3, null, 308, {}, null, neutral],
    ]);
    expect(await tablesHolding(h.rt.db, [...signatures, EMAIL])).toEqual(Object.fromEntries([...signatures, EMAIL].map((text) => [text, {}])));
    const untouched = await h.delivery(kept.id);
    expect(untouched.last_error).toBe(quoted("kept.mk9@example.com"));
    expect(untouched.attempt_history.map((a: any) => [a.request_headers["webhook-signature"], a.error])).toEqual(
      r.received.filter((x) => x.json?.data?.id === other.id).map((x) => [x.headers["webhook-signature"], quoted("kept.mk9@example.com")]),
    );
  });

  test("is idempotent: the same Idempotency-Key replays the answer, and sent again without one it erases nothing more", async () => {
    const h = await scope.harness();
    const id = await makeDeletedContact(h);
    expect((await h.request("DELETE", `/public/v1/contacts/${id}`)).status).toBe(204);
    const first = await erase(h, `contacts/deleted/${id}`, { "idempotency-key": "erase-1" });
    expect(first.body).toEqual({ data: { id, events_erased: 5, deliveries_failed: 0 } });
    const replay = await erase(h, `contacts/deleted/${id}`, { "idempotency-key": "erase-1" });
    expect([replay.status, replay.headers.get("idempotent-replayed"), replay.body]).toEqual([200, "true", first.body]);
    const again = await erase(h, `contacts/deleted/${id}`);
    expect([again.status, again.body]).toEqual([200, { data: { id, events_erased: 0, deliveries_failed: 0 } }]);
  });
});
