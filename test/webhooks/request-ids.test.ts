import { describe, expect, test } from "bun:test";
import { createApiToken } from "../../server/auth/service.ts";
import { createLogger } from "../../server/shared/log.ts";
import { commandOrigin } from "../../server/shared/made-by.ts";
import { deleteUser } from "../../server/users/service.ts";
import { addStoredDeliveries, addStoredSubscription, settledDeliveries, waitFor, webhookTestScope, type WebhookHarness } from "./support.ts";

// Every event records the id of the request whose change made it (its answer's X-Request-Id), and
// each delivery shows it: a receiver's surprising event leads to the request, and a request id
// from a client's report leads to the deliveries it caused (GET /webhook-deliveries?request_id=).

const scope = webhookTestScope();
let h: WebhookHarness;

/** send makes an API request with the given X-Request-Id (none: the service makes one) and returns the id its answer carries. */
async function send(method: string, path: string, requestId: string | null, body?: unknown): Promise<{ status: number; requestId: string; body: any }> {
  const res = await h.json(method, path, { body, headers: requestId === null ? {} : { "x-request-id": requestId } });
  return { status: res.status, requestId: res.headers.get("x-request-id")!, body: res.body };
}

/** shown is what the test reads of a delivery: its kind and request id. */
const shown = (deliveries: { event_type: string; request_id: string | null }[]) => deliveries.map((d) => [d.event_type, d.request_id]);

describe("the request that made an event", () => {
  test("a create, PATCH and delete with X-Request-Id: each delivery, listed and in detail, shows its request's id, and request_id lists the deliveries of one request", async () => {
    h = await scope.harness();
    const first = scope.receiver("/first");
    const second = scope.receiver("/second");
    await h.subscribe(first.url, ["contact.created", "contact.updated", "contact.deleted"]);
    await h.subscribe(second.url, ["contact.updated"]);
    const created = await send("POST", "/public/v1/contacts", "import-job-42.row-7", { first_name: "Ada" });
    const id = created.body.data.id;
    const patched = await send("PATCH", `/public/v1/contacts/${id}`, "client:patch-1", { last_name: "Lovelace" });
    // An id shaped like an API token is replaced, and the event has the id the answer carries.
    const deleted = await send("DELETE", `/public/v1/contacts/${id}`, "crm_looks_like_a_token");
    expect([created.status, patched.status, deleted.status, created.requestId, patched.requestId, deleted.requestId]).toEqual([
      201,
      200,
      204,
      "import-job-42.row-7",
      "client:patch-1",
      expect.stringMatching(/^req_[0-9A-Z]{26}$/),
    ]);
    const all = await settledDeliveries(h);
    expect(shown(all)).toEqual([
      ["contact.deleted", deleted.requestId],
      ["contact.updated", "client:patch-1"],
      ["contact.updated", "client:patch-1"],
      ["contact.created", "import-job-42.row-7"],
    ]);
    for (const delivery of all) expect(await h.delivery(delivery.id)).toEqual({ ...delivery, payload: expect.anything(), payload_erased_at: null, attempt_history: expect.any(Array) });
    const patchDeliveries = all.filter((d) => d.request_id === "client:patch-1");
    expect(await h.deliveries("request_id=client:patch-1")).toEqual(patchDeliveries);
    expect(await h.json("GET", "/public/v1/webhook-deliveries?request_id=import-job-42.row-7&event=contact.created")).toEqual({
      status: 200,
      headers: expect.anything(),
      body: { data: [all[3]], meta: expect.objectContaining({ total: 1 }) },
    });
    expect(await h.deliveries("request_id=no-such-request")).toEqual([]);
    // The body sent is as before: the request id is not in it.
    expect(first.received.map((r) => Object.keys(r.json))).toEqual([
      ["type", "event_id", "timestamp", "data"],
      ["type", "event_id", "timestamp", "data"],
      ["type", "event_id", "timestamp", "data"],
    ]);
  });

  test("a batch's events and those of an account's delete (a set-wise change) carry their request's id; a test event its own", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    const sub = await h.subscribe(r.url, ["contact.created", "contact.updated", "account.deleted", "webhook.ping"]);
    const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Acme" } })).body.data;
    const batch = await send("POST", "/public/v1/contacts/batch", "nightly-sync.batch-1", {
      items: [
        { email: "ada@example.com", account_ids: [account.id] },
        { email: "grace@example.com", account_ids: [account.id] },
      ],
    });
    expect(batch.body.data.map((result: { status: string }) => result.status)).toEqual(["created", "created"]);
    const removed = await send("DELETE", `/public/v1/accounts/${account.id}`, "account-cleanup");
    const ping = await send("POST", `/public/v1/webhook-subscriptions/${sub.id}/test`, null);
    expect([removed.status, ping.status]).toEqual([204, 202]);
    const all = await settledDeliveries(h);
    expect(shown(all)).toEqual([
      ["webhook.ping", ping.requestId],
      ["account.deleted", "account-cleanup"],
      ["contact.updated", "account-cleanup"],
      ["contact.updated", "account-cleanup"],
      ["contact.created", "nightly-sync.batch-1"],
      ["contact.created", "nightly-sync.batch-1"],
    ]);
    expect(shown(await h.deliveries("request_id=nightly-sync.batch-1"))).toEqual([
      ["contact.created", "nightly-sync.batch-1"],
      ["contact.created", "nightly-sync.batch-1"],
    ]);
  });

  test("a replayed POST makes no event: the delivery keeps the id of the request that made it", async () => {
    h = await scope.harness();
    const r = scope.receiver();
    await h.subscribe(r.url, ["contact.created"]);
    const headers = (requestId: string) => ({ "x-request-id": requestId, "idempotency-key": "row-7-key" });
    const made = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" }, headers: headers("first-try") });
    const replayed = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" }, headers: headers("second-try") });
    expect([made.status, replayed.status, replayed.body]).toEqual([201, 201, made.body]);
    expect(shown(await settledDeliveries(h))).toEqual([["contact.created", "first-try"]]);
  });

  test("an event recorded before request ids (null) lists and reads as before, and a filter of another request leaves it out", async () => {
    h = await scope.harness();
    const subscriptionId = await h.rt.db.write((tx) => addStoredSubscription(tx, Date.now()));
    await h.rt.db.write((tx) => addStoredDeliveries(tx, subscriptionId, Date.now() - 60_000, "succeeded"));
    const [old] = await h.deliveries();
    expect(old).toEqual({
      id: expect.stringMatching(/^dlv_/),
      event_id: expect.stringMatching(/^evt_/),
      event_type: "contact.created",
      subscription_id: subscriptionId,
      target_url: "https://receiver.example.com/hooks",
      status: "succeeded",
      attempts: 1,
      last_response_status: 200,
      last_error: null,
      next_attempt_at: null,
      request_id: null,
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    expect(await h.delivery(old.id)).toEqual({ ...old, payload: {}, payload_erased_at: null, attempt_history: [] });
    expect(await h.deliveries("request_id=some-request")).toEqual([]);
  });

  test("request_id takes an id a client may send (X-Request-Id's characters, 1 to 100), and refuses another with 422", async () => {
    h = await scope.harness();
    for (const value of ["a%20b", "x".repeat(101), ""]) {
      const res = await h.json("GET", `/public/v1/webhook-deliveries?request_id=${value}`);
      expect([res.status, res.body.errors]).toEqual([422, [{ parameter: "request_id", detail: "must be a request id: 1 to 100 of A-Z a-z 0-9 . _ : -" }]]);
    }
    expect((await h.json("GET", `/public/v1/webhook-deliveries?request_id=${"x".repeat(100)}`)).status).toBe(200);
  });

  test("the attempt's log line names the request that made its event", async () => {
    const lines: Record<string, unknown>[] = [];
    h = await scope.harness({}, { log: createLogger("info", (line) => lines.push(JSON.parse(line))) });
    const r = scope.receiver();
    await h.subscribe(r.url, ["contact.created"]);
    await send("POST", "/public/v1/contacts", "import-job-42.row-8", { first_name: "Ada" });
    const [delivery] = await settledDeliveries(h);
    const attempt = await waitFor(() => lines.find((line) => line.msg === "webhook attempt"), "the attempt's log line");
    expect(attempt).toEqual({
      time: expect.any(String),
      level: "info",
      msg: "webhook attempt",
      delivery_id: delivery.id,
      subscription_id: delivery.subscription_id,
      event_type: "contact.created",
      request_id: "import-job-42.row-8",
      trigger: "scheduled",
      response_status: 200,
      duration_ms: expect.any(Number),
      delivery_status: "succeeded",
    });
  });

  test("each event records the id of the API token whose request made it (never the token), the request's log line names it, and a change no request made records none", async () => {
    const lines: Record<string, unknown>[] = [];
    h = await scope.harness({}, { log: createLogger("info", (line) => lines.push(JSON.parse(line))) });
    const zapier = await createApiToken(h.rt.db, "zapier-sync");
    const own = await h.rt.db.get<{ id: string }>("SELECT id FROM api_tokens WHERE name = 'test'");
    const created = await send("POST", "/public/v1/contacts", "hs-sync-7781", { first_name: "Ada" });
    const id = created.body.data.id;
    const deleted = await h.json("DELETE", `/public/v1/contacts/${id}`, { headers: { authorization: `Bearer ${zapier.token}`, "x-request-id": "nightly-cleanup-42" } });
    expect(deleted.status).toBe(204);
    const events = await h.rt.db.all<{ type: string; request_id: string | null; token_id: string | null }>("SELECT type, request_id, token_id FROM events ORDER BY created_at, id");
    expect(events).toEqual([
      { type: "contact.created", request_id: "hs-sync-7781", token_id: own!.id },
      { type: "contact.deleted", request_id: "nightly-cleanup-42", token_id: zapier.info.id },
    ]);
    expect(JSON.stringify(await h.rt.db.all("SELECT * FROM events"))).not.toContain(zapier.token);
    const line = await waitFor(() => lines.find((l) => l.msg === "request" && l.method === "DELETE"), "the DELETE's log line");
    expect(line).toEqual({ time: expect.any(String), level: "info", msg: "request", request_id: "nightly-cleanup-42", token_id: zapier.info.id, method: "DELETE", path: `/public/v1/contacts/${id}`, status: 204, duration_ms: expect.any(Number) });
    // The command line's user delete (crm user delete) is made by no request: no token either, the command its maker.
    const user = await send("POST", "/public/v1/users", null, { email: "owner@example.com", name: "Owner" });
    await send("POST", "/public/v1/contacts", null, { first_name: "Grace", assigned_user_id: user.body.data.id });
    await deleteUser(h.rt.db, user.body.data.id, 100, commandOrigin("user delete"));
    expect(await h.rt.db.get("SELECT request_id, token_id, made_by FROM events WHERE type = 'contact.updated'")).toEqual({ request_id: null, token_id: null, made_by: '{"kind":"command_line","command":"user delete"}' });
  });
});
