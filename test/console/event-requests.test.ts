import { afterAll, beforeAll, expect, test } from "bun:test";
import { SEALED_ADDRESS_TTL_MS, sealFields } from "../../console/addresses.ts";
import { insertAttempt } from "../../server/webhooks/store.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { addOperator, ConsoleClient, formKeyOf } from "./support.ts";

// The events of a console action carry the console request's id, as the API's carry theirs: the
// delivery page shows it with a link to the deliveries of that request, which the Request id filter lists.
let h: Harness;
let client: ConsoleClient;

beforeAll(async () => {
  h = await createHarness({ allowPrivateTargets: true });
  await addOperator(h.rt.db);
  client = new ConsoleClient((request) => h.app.handle(request));
  expect((await client.signIn()).status).toBe(303);
});

afterAll(() => h.close());

/** api calls the public API with the harness token and returns the parsed body, failing on an error status. */
async function api(method: string, path: string, body?: unknown) {
  const res = await h.json(method, path, { body });
  if (res.status >= 400) throw new Error(`${method} ${path} answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body;
}

/** requestFact is what the delivery page says under "Request", its tags dropped. */
const requestFact = (html: string) => /<dd id="request-id">(.*?)<\/dd>/s.exec(html)![1]!.replace(/<[^>]+>/g, "");

test("a user deleted on the Users page: its contacts' contact.updated carry the console request's id, shown on the delivery page and found by the Request id filter", async () => {
  await api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/console-requests", events: ["contact.created", "contact.updated"] });
  const user = (await api("POST", "/public/v1/users", { name: "Leaving", email: "leaving@example.com" })).data;
  const contact = (await api("POST", "/public/v1/contacts", { first_name: "Ada", assigned_user_id: user.id })).data;
  const shown = await client.get(`/console/users/${user.id}/delete`);
  const deleted = await client.post(`/console/users/${user.id}/delete`, { form_key: formKeyOf(shown.text) });
  const requestId = deleted.headers.get("x-request-id")!;
  expect([deleted.status, requestId]).toEqual([303, expect.stringMatching(/^req_[0-9A-Z]{26}$/)]);

  const ofRequest = (await api("GET", `/public/v1/webhook-deliveries?request_id=${requestId}`)).data;
  expect(ofRequest.map((d: { event_type: string; request_id: string }) => [d.event_type, d.request_id])).toEqual([["contact.updated", requestId]]);
  const created = (await api("GET", "/public/v1/webhook-deliveries?event=contact.created")).data;
  expect(created.map((d: { request_id: string }) => d.request_id)).toEqual([expect.stringMatching(/^req_/)]);
  expect(created[0].request_id).not.toBe(requestId);

  const page = await client.get(`/console/deliveries/${ofRequest[0].id}`);
  expect([page.status, requestFact(page.text)]).toEqual([200, `${requestId} deliveries of this request (the X-Request-Id of the request that made the event)`]);
  // Sealed as the Request id filter's addresses are: a request id is text a client chose.
  const link = /<a href="([^"]+)">deliveries of this request<\/a>/.exec(page.text)![1]!;
  expect([link, page.text.includes("request_id=")]).toEqual([expect.stringMatching(/^\/console\/\?s=[A-Za-z0-9_-]+$/), false]);
  for (const address of [link, `/console/?request_id=${requestId}`]) {
    const listed = await client.get(address);
    expect([listed.status, listed.text.includes(ofRequest[0].id), listed.text.includes(created[0].id)]).toEqual([200, true, false]);
  }
  const live = JSON.parse((await client.get(`/console/api/deliveries?request_id=${requestId}`)).text);
  expect(live.data.map((d: { id: string }) => d.id)).toEqual([ofRequest[0].id]);
  expect(contact.assigned_user_id).toBe(user.id);
});

test("a delivery whose event no request made says so, and a request id no X-Request-Id could be is refused by the filter", async () => {
  const subscription = (await api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/no-request", events: ["contact.created"] })).data;
  await h.rt.db.write((tx) =>
    tx.run("INSERT INTO events (id, type, payload, created_at) VALUES ('evt_01KB0000000000000000000000', 'contact.created', '{}', ?)", [Date.now()]),
  );
  await h.rt.db.write((tx) =>
    tx.run(
      "INSERT INTO webhook_deliveries (id, event_id, event_type, subscription_id, target_url, status, attempts, created_at, updated_at) VALUES ('dlv_01KB0000000000000000000000', 'evt_01KB0000000000000000000000', 'contact.created', ?, ?, 'failed', 0, ?, ?)",
      [subscription.id, subscription.target_url, Date.now(), Date.now()],
    ),
  );
  const page = await client.get("/console/deliveries/dlv_01KB0000000000000000000000");
  expect([page.status, requestFact(page.text)]).toEqual([200, "none: the service made this event itself, or a command did, or it is older than request ids"]);
  const refused = await client.get("/console/api/deliveries?request_id=a%20b");
  expect([refused.status, JSON.parse(refused.text).errors]).toEqual([422, [{ parameter: "request_id", detail: "must be a request id: 1 to 100 of A-Z a-z 0-9 . _ : -" }]]);
});

// A deleted contact's events erased through the API: the console's delivery, event and contact
// pages say when, and show nothing of the record, nor a Retry now the API would refuse.
const ERASED = /Erased <time[^>]*>[^<]+<\/time>, after its contact or account was deleted: nothing of the record is kept, shown or sent any more\./;
/** ERASED_BY is the event page's words for it, which say who erased it (the API token, linked). */
const ERASED_BY = /Erased <time[^>]*>[^<]+<\/time> by <a href="\/console\/tokens#tok_\w+"><span>API token <bdi>test<\/bdi>[\s\S]*?<\/a> <span class="muted">\(<code>tok_\w+<\/code>\)<\/span>, after its contact or account was deleted: nothing of the record is kept, shown or sent any more\./;

test("the delivery, event and contact pages of an erased contact's events say it was erased, and when, instead of the record", async () => {
  await api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/erased", events: ["contact.created", "contact.deleted"] });
  const contact = (await api("POST", "/public/v1/contacts", { email: "shown.erase7@example.com", first_name: "Shown" })).data;
  const [delivery] = (await api("GET", "/public/v1/webhook-deliveries?event=contact.created")).data;
  const request_headers = { "content-type": "application/json", "webhook-id": delivery.id, "webhook-timestamp": "1", "webhook-signature": "v1,SignedErase7Mk9xxxxxxxxxxx" };
  await h.rt.db.write((tx) =>
    insertAttempt(tx, { delivery_id: delivery.id, attempt: 1, triggered_by: "scheduled", started_at: Date.now(), duration_ms: 1, request_headers, response_status: 200, response_headers: {}, response_body: "ok", error: null }),
  );
  const before = (await client.get(`/console/deliveries/${delivery.id}`)).text;
  expect([before.includes("shown.erase7@example.com"), before.includes("v1,SignedErase7"), before.includes("erased with the payload")]).toEqual([true, true, false]);
  expect((await h.request("DELETE", `/public/v1/contacts/${contact.id}`)).status).toBe(204);
  await api("POST", `/public/v1/contacts/deleted/${contact.id}/erase`);

  const deliveryPage = (await client.get(`/console/deliveries/${delivery.id}`)).text;
  expect(deliveryPage).toMatch(ERASED);
  expect(deliveryPage).toContain("No Retry now: what it sent was erased after its contact or account was deleted, so nothing of it can be sent any more.");
  expect(deliveryPage).not.toContain("Retry now</button>");
  expect(deliveryPage).toContain('<h4>Request headers</h4><p class="muted headers-erased">erased with the payload</p>');
  expect(deliveryPage).not.toContain("v1,SignedErase7");
  const eventPage = (await client.get(`/console/events/${delivery.event_id}`)).text;
  expect(eventPage).toMatch(ERASED_BY);
  expect(eventPage).toContain(`href="/console/contacts/${contact.id}"`);
  const contactPage = (await client.get(`/console/contacts/${contact.id}`)).text;
  expect(contactPage.match(/<span class="tag">payload erased<\/span>/g)?.length).toBe(1);
  for (const page of [deliveryPage, eventPage, contactPage]) expect(page).not.toMatch(/shown\.erase7|Shown/);
});

test("the Request id filter posts and is sealed, as typed text is: no address of its pages (latest, older, the live table's refresh) holds the request id", async () => {
  // account.created, which no other subscription of this file takes: the request's deliveries are this one's 51.
  await api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/sealed-request", events: ["account.created"] });
  // Any X-Request-Id a client chose: a password of these characters pasted into the field would be one too.
  const requestId = "job-7:row.9_sealed";
  const items = Array.from({ length: 51 }, (_, i) => ({ name: `Sealed ${i}` }));
  expect((await h.json("POST", "/public/v1/accounts/batch", { body: { items }, headers: { "x-request-id": requestId } })).status).toBe(200);
  const ofRequest = (await api("GET", `/public/v1/webhook-deliveries?request_id=${requestId}&per_page=100`)).data.map((d: { id: string }) => d.id);
  expect(ofRequest).toHaveLength(51);
  /** shown is what a deliveries page lists, and whether any of its addresses (links, the live table's props) holds the request id. */
  const shown = (html: string) => ({ rows: [...html.matchAll(/data-delivery-id="(dlv_[0-9A-Z]{26})"/g)].map((m) => m[1]), inAddress: html.includes("request_id=") || html.includes(encodeURIComponent(requestId)) });
  await client.get("/console/");
  const posted = await client.post("/console/", { request_id: requestId });
  const location = posted.headers.get("location")!;
  expect([posted.status, location]).toEqual([303, expect.stringMatching(/^\/console\/\?s=[A-Za-z0-9_-]+$/)]);
  const latest = await client.get(location);
  expect([latest.status, shown(latest.text)]).toEqual([200, { rows: ofRequest.slice(0, 50), inAddress: false }]);
  const live = JSON.parse(/<script type="application\/json" id="island-deliveries-props">(.*?)<\/script>/s.exec(latest.text)![1]!);
  // Each page seals anew (a fresh nonce): the same filters, another seal.
  const SEALED = /^\/console\/\?s=[A-Za-z0-9_-]+$/;
  expect([`/console/${live.query}`, JSON.parse((await client.get(`/console/api/deliveries${live.query}`)).text).data.map((d: { id: string }) => d.id)]).toEqual([expect.stringMatching(SEALED), ofRequest.slice(0, 50)]);
  const olderAddress = /<a class="button ghost" href="([^"]+)" rel="next"/.exec(latest.text)![1]!.replaceAll("&amp;", "&");
  expect(olderAddress).toMatch(SEALED);
  const older = await client.get(olderAddress);
  const latestAddress = /<a class="button ghost" href="([^"]+)">\s*← Latest/.exec(older.text)![1]!;
  expect([older.status, shown(older.text), latestAddress]).toEqual([200, { rows: ofRequest.slice(50), inAddress: false }, expect.stringMatching(SEALED)]);
  expect(shown((await client.get(latestAddress)).text).rows).toEqual(ofRequest.slice(0, 50));
  // Past its hour the live table's address answers 410, and the table stops.
  const expired = await client.get(`/console/api/deliveries?s=${sealFields(h.rt.secrets, "deliveries", client.csrf, { request_id: requestId }, Date.now() - SEALED_ADDRESS_TTL_MS)}`);
  expect([expired.status, JSON.parse(expired.text).type]).toEqual([410, "urn:crm:problem:filters-expired"]);
});
