import { afterAll, beforeAll, expect, test } from "bun:test";
import { rotationView, startRotation } from "../../console/subscriptions/service.ts";
import { setRotationTestDelivery } from "../../console/subscriptions/store.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { UNLINK_CHUNK } from "../../server/contacts/service.ts";
import { operatorLink } from "../../server/operators/service.ts";
import { signingSecrets } from "../../server/webhooks/delivery.ts";
import { endRotationGrace } from "../../server/webhooks/service.ts";
import { findSubscriptionById } from "../../server/webhooks/store.ts";
import { addOperator, ConsoleClient, formKeyOf, seedDeliveries, startConsoleServer, type ConsoleServer } from "./support.ts";

// Console forms sent twice at once (a double click, a browser retry) make their change once, and
// both answers show what the first one made, its secret included: the browser shows the second.
let server: ConsoleServer;
let client: ConsoleClient;
/** operator is the one signed in, who makes what the console's services called directly make */
let operator: Awaited<ReturnType<typeof addOperator>>;

beforeAll(async () => {
  server = await startConsoleServer();
  operator = await addOperator(server.runtime.db);
  client = new ConsoleClient((request) => fetch(request, { redirect: "manual" }), server.url);
  await client.signIn();
});

afterAll(() => server.close());

/** shownSecret is the signing secret a console page shows (SecretOnce), or null. */
const shownSecret = (html: string) => /id="new-secret"[^>]*value="([^"]+)"/.exec(html)?.[1] ?? null;

/** sentTwice posts one form twice at once, as a double click does, and returns both answers. */
const sentTwice = (path: string, form: Record<string, string | string[] | null>) => Promise.all([client.post(path, form), client.post(path, form)]);

/** redirectsOf is each answer's status and Location. */
const redirectsOf = (answers: { status: number; headers: Headers }[]) => answers.map((a) => [a.status, a.headers.get("location")]);

/** errorNoticeOf is the error a console page shows above its form. */
const errorNoticeOf = (html: string) => /class="notice notice-error"[^>]*>([^<]*)</.exec(html)?.[1];

test("the rotation wizard's new-subscription form starts one rotation, and both answers show its one secret", async () => {
  const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/twice-old", events: ["contact.created"] })).data;
  await client.get(`/console/rotations/new?from=${old.id}`);
  const form = { from: old.id, target_url: "http://127.0.0.1:9/twice-new", description: "Sent twice", events: ["contact.created"] };
  const answers = await sentTwice("/console/rotations", form);
  const rotations = await server.runtime.db.all<{ id: string }>("SELECT new_subscription_id AS id FROM subscription_rotations WHERE old_subscription_id = ?", [old.id]);
  const created = (await server.api("GET", "/public/v1/webhook-subscriptions?per_page=100")).data.filter((s: { target_url: string }) => s.target_url.endsWith("/twice-new"));
  expect({ rotations, created: created.map((s: { id: string }) => s.id) }).toEqual({ rotations: [{ id: rotations[0]!.id }], created: [rotations[0]!.id] });
  const secret = shownSecret(answers[0]!.text);
  expect(secret).toStartWith("whsec_");
  expect(answers.map((a) => [a.status, shownSecret(a.text)])).toEqual([
    [201, secret],
    [201, secret],
  ]);
  // Once the rotation sent its test event, the form sent again leads to the rotation without its secret.
  const [tested] = await seedDeliveries(server.runtime.db, { id: rotations[0]!.id, target_url: "http://127.0.0.1:9/twice-new" }, [{ at: Date.now(), status: "succeeded" }]);
  await setRotationTestDelivery(server.runtime.db, rotations[0]!.id, tested!, Date.now());
  const later = await client.post("/console/rotations", form);
  expect([later.status, later.headers.get("location"), shownSecret(later.text)]).toEqual([303, `/console/rotations/${rotations[0]!.id}`, null]);
});

/** pingsTo lists the ids of the webhook.ping deliveries made to a subscription. */
const pingsTo = (subscriptionId: string) =>
  server.runtime.db.all<{ id: string }>("SELECT id FROM webhook_deliveries WHERE subscription_id = ? AND event_type = 'webhook.ping' ORDER BY id", [subscriptionId]);

test("the rotation wizard's Send test event sends one ping, and both answers lead to the step watching it", async () => {
  const old = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/pinged-twice-old", events: ["contact.created"] })).data;
  const { id } = await startRotation(server.runtime, operator, old.id, { target_url: "http://127.0.0.1:9/pinged-twice-new", description: "", events: ["contact.created"] }, "req-test");
  const shown = await client.get(`/console/rotations/${id}`);
  const answers = await sentTwice(`/console/rotations/${id}/test`, { form_key: formKeyOf(shown.text) });
  const pings = await pingsTo(id);
  expect({ answers: redirectsOf(answers), pings: pings.length, test: (await rotationView(server.runtime.db, id)).test?.id }).toEqual({
    answers: [
      [303, `/console/rotations/${id}#step-test`],
      [303, `/console/rotations/${id}#step-test`],
    ],
    pings: 1,
    test: pings[0]!.id,
  });
  // The page shown after it draws a new key: "Send another test event" sends another.
  const again = await client.get(`/console/rotations/${id}`);
  expect((await client.post(`/console/rotations/${id}/test`, { form_key: formKeyOf(again.text) })).status).toBe(303);
  expect((await pingsTo(id)).length).toBe(2);
});

test("the secret rotation wizard's Send test event sends one ping, and both answers lead to the step watching it", async () => {
  const subscription = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/secret-pinged-twice", events: ["contact.created"] })).data;
  await server.api("POST", `/public/v1/webhook-subscriptions/${subscription.id}/rotate-secret`, { grace_hours: 24 });
  const path = `/console/subscriptions/${subscription.id}/secret-rotation`;
  const shown = await client.get(path);
  const answers = await sentTwice(`${path}/test`, { form_key: formKeyOf(shown.text) });
  const pings = await pingsTo(subscription.id);
  expect({ answers: redirectsOf(answers), pings: pings.length, test: (await findSubscriptionById(server.runtime.db, subscription.id))?.secret_test_delivery_id }).toEqual({
    answers: [
      [303, `${path}#step-test`],
      [303, `${path}#step-test`],
    ],
    pings: 1,
    test: pings[0]!.id,
  });
});

/** rotateFormOf is the rotate-secret form a secret rotation page shows, with a grace period typed in. */
const rotateFormOf = (html: string, grace_hours: string) => ({ grace_hours, secret_tag: /name="secret_tag" value="([^"]+)"/.exec(html)![1]!, form_key: formKeyOf(html) });

test("the rotate-secret form rotates once: both answers show the one new secret, and the receiver's secret keeps signing", async () => {
  const subscription = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/rotated-twice", events: ["contact.created"] })).data;
  const shown = await client.get(`/console/subscriptions/${subscription.id}/secret-rotation`);
  const form = rotateFormOf(shown.text, "24");
  const answers = await sentTwice(`/console/subscriptions/${subscription.id}/rotate-secret`, form);
  const stored = async () => {
    const row = (await server.runtime.db.get<{ secret: string; previous_secret: string | null }>("SELECT secret, previous_secret FROM webhook_subscriptions WHERE id = ?", [subscription.id]))!;
    return { current: server.runtime.secrets.open(subscription.id, row.secret), previous: row.previous_secret && server.runtime.secrets.open(subscription.id, row.previous_secret) };
  };
  const { current } = await stored();
  expect(current).not.toBe(subscription.secret);
  expect({ answers: answers.map((a) => [a.status, shownSecret(a.text)]), stored: await stored() }).toEqual({
    answers: [
      [201, current],
      [201, current],
    ],
    stored: { current, previous: subscription.secret },
  });
  // Retiring the previous secret is no new rotation: sent again, the form still shows the secret it made.
  await endRotationGrace(server.runtime, subscription.id, null);
  const reloaded = await client.post(`/console/subscriptions/${subscription.id}/rotate-secret`, form);
  expect([reloaded.status, shownSecret(reloaded.text)]).toEqual([201, current]);
  expect(await stored()).toEqual({ current, previous: null });
});

test("a rotate-secret form rotates nothing and shows no secret once a later rotation made another (the API's, a grace period over or not); sent again, it shows its own rotation's secret only to its operator, for 10 minutes", async () => {
  const subscription = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/rotated-stale", events: ["contact.created"] })).data;
  const path = `/console/subscriptions/${subscription.id}`;
  const current = async () => server.runtime.secrets.open(subscription.id, (await findSubscriptionById(server.runtime.db, subscription.id))!.secret);
  /** refusal is a rotate-secret answer's status, notice and the secret it shows. */
  const refusal = (res: { status: number; text: string }) => [res.status, errorNoticeOf(res.text), shownSecret(res.text)];
  const refused = [409, "The secret was rotated since this page was shown, so it was not rotated again; the page now shows where that rotation stands.", null];
  // A page left open; an integration rotates through the API, and is the only one shown its secret.
  const stalePage = rotateFormOf((await client.get(`${path}/secret-rotation`)).text, "0");
  const apiSecret = (await server.api("POST", `/public/v1/webhook-subscriptions/${subscription.id}/rotate-secret`, { grace_hours: 1 })).data.secret;
  expect([refusal(await client.post(`${path}/rotate-secret`, stalePage)), await current()]).toEqual([refused, apiSecret]);
  await server.runtime.db.write((tx) => tx.run("UPDATE webhook_subscriptions SET previous_secret_expires_at = ? WHERE id = ?", [Date.now() - 7 * 86_400_000, subscription.id]));
  expect([refusal(await client.post(`${path}/rotate-secret`, stalePage)), await current()]).toEqual([refused, apiSecret]);

  // This operator rotates; another operator sending the same form (its key too) gets no secret.
  const form = rotateFormOf((await client.get(`${path}/secret-rotation`)).text, "0");
  const rotated = await client.post(`${path}/rotate-secret`, form);
  const made = await current();
  expect([rotated.status, shownSecret(rotated.text)]).toEqual([201, made]);
  const colleague = { email: "rotating-colleague@example.com", password: "a long enough password" };
  await addOperator(server.runtime.db, colleague);
  const other = new ConsoleClient((request) => fetch(request, { redirect: "manual" }), server.url);
  await other.signIn(colleague);
  await other.get(`${path}/secret-rotation`); // for the session's CSRF token
  expect(refusal(await other.post(`${path}/rotate-secret`, form))).toEqual(refused);
  // Its own operator's reload shows it for 10 minutes after the rotation, then no more.
  expect([(await client.post(`${path}/rotate-secret`, form)).status, await current()]).toEqual([201, made]);
  await server.runtime.db.write((tx) => tx.run("UPDATE webhook_subscriptions SET secret_rotated_at = secret_rotated_at - ? WHERE id = ?", [10 * 60_000 + 1, subscription.id]));
  expect([refusal(await client.post(`${path}/rotate-secret`, form)), await current()]).toEqual([refused, made]);
  // And a later rotation by the API ends it at once.
  await server.runtime.db.write((tx) => tx.run("UPDATE webhook_subscriptions SET secret_rotated_at = ? WHERE id = ?", [Date.now(), subscription.id]));
  expect((await client.post(`${path}/rotate-secret`, form)).status).toBe(201);
  const later = (await server.api("POST", `/public/v1/webhook-subscriptions/${subscription.id}/rotate-secret`, { grace_hours: 0 })).data.secret;
  expect([refusal(await client.post(`${path}/rotate-secret`, form)), await current()]).toEqual([refused, later]);
});

test("the rotate-secret form with no grace period, sent twice, rotates once and both answers show the new secret", async () => {
  const subscription = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/rotated-at-once-twice", events: ["contact.created"] })).data;
  const shown = await client.get(`/console/subscriptions/${subscription.id}/secret-rotation`);
  const form = rotateFormOf(shown.text, "0");
  const answers = await sentTwice(`/console/subscriptions/${subscription.id}/rotate-secret`, form);
  const row = (await server.runtime.db.get<{ secret: string }>("SELECT secret FROM webhook_subscriptions WHERE id = ?", [subscription.id]))!;
  const current = server.runtime.secrets.open(subscription.id, row.secret);
  expect(current).not.toBe(subscription.secret);
  expect(answers.map((a) => [a.status, shownSecret(a.text)])).toEqual([
    [201, current],
    [201, current],
  ]);
  // The replaced secret signs nothing: an event's delivery carries one signature, the new secret's.
  expect(signingSecrets((await findSubscriptionById(server.runtime.db, subscription.id))!, "dlv_any", Date.now()).map((sealed) => server.runtime.secrets.open(subscription.id, sealed))).toEqual([current]);
});

test("the subscriptions page's create form makes one subscription, and both answers show its secret; that form with other values is 409", async () => {
  const shown = await client.get("/console/subscriptions");
  const form = { form_key: formKeyOf(shown.text), target_url: "http://127.0.0.1:9/created-twice", description: "", events: ["contact.created"] };
  const answers = await sentTwice("/console/subscriptions", form);
  const created = (await server.api("GET", "/public/v1/webhook-subscriptions?per_page=100")).data.filter((s: { target_url: string }) => s.target_url.endsWith("/created-twice"));
  expect(created.length).toBe(1);
  const row = (await server.runtime.db.get<{ secret: string }>("SELECT secret FROM webhook_subscriptions WHERE id = ?", [created[0].id]))!;
  const secret = server.runtime.secrets.open(created[0].id, row.secret);
  expect(answers.map((a) => [a.status, shownSecret(a.text)])).toEqual([
    [201, secret],
    [201, secret],
  ]);
  const edited = await client.post("/console/subscriptions", { ...form, description: "Other" });
  expect([edited.status, errorNoticeOf(edited.text)]).toEqual([409, "This form was already sent with other values. Load the page again to send it anew."]);
  // Each showing of the page draws a new key: the form sent from it creates another subscription.
  const again = await client.get("/console/subscriptions");
  expect(formKeyOf(again.text)).not.toBe(form.form_key);
});

test("the users page's form adds one user, and both answers lead to the list saying so, not that the email is taken", async () => {
  const shown = await client.get("/console/users");
  const form = { form_key: formKeyOf(shown.text), name: "Grace Hopper", email: "grace.twice@example.com" };
  const answers = await sentTwice("/console/users", form);
  expect(redirectsOf(answers)).toEqual([
    [303, "/console/users?added=1"],
    [303, "/console/users?added=1"],
  ]);
  const users = (await server.api("GET", "/public/v1/users?per_page=100")).data.filter((u: { email: string }) => u.email === "grace.twice@example.com");
  expect(users.map((u: { name: string }) => u.name)).toEqual(["Grace Hopper"]);
});

test("the delete-user confirmation deletes the user, and both answers lead to the list saying so and how many contacts lost the assignment, not to a 404", async () => {
  const user = (await server.api("POST", "/public/v1/users", { name: "Deleted Twice", email: "deleted.twice@example.com" })).data;
  // One contact more than a write unassigns: the delete takes two writes, and its answer, recorded with the last, counts both.
  const owned = Array.from({ length: UNLINK_CHUNK + 1 }, (_, i) => ({ first_name: "Owned", email: `owned.${i}@example.com`, assigned_user_id: user.id }));
  for (let i = 0; i < owned.length; i += 100) await server.api("POST", "/public/v1/contacts/batch", { items: owned.slice(i, i + 100) });
  const shown = await client.get(`/console/users/${user.id}/delete`);
  const answers = await sentTwice(`/console/users/${user.id}/delete`, { form_key: formKeyOf(shown.text) });
  // The replay says how many contacts the one delete changed, not the none a second would.
  expect(redirectsOf(answers)).toEqual([
    [303, `/console/users?deleted=1&unassigned=${UNLINK_CHUNK + 1}`],
    [303, `/console/users?deleted=1&unassigned=${UNLINK_CHUNK + 1}`],
  ]);
  expect(await server.runtime.db.all("SELECT id FROM users WHERE id = ?", [user.id])).toEqual([]);
  const unknown = await client.post(`/console/users/${user.id}/delete`, { form_key: crypto.randomUUID() });
  expect(unknown.status).toBe(404);
});

test("the recover form queues the failed deliveries once, and both answers give the count it queued, not 0", async () => {
  const subscription = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/recovered-twice", events: ["contact.updated"] })).data;
  const at = Date.now() - 30 * 60_000;
  await seedDeliveries(server.runtime.db, subscription, [
    { at, status: "failed", response_status: 503 },
    { at: at + 1, status: "failed", response_status: 503 },
  ]);
  const minute = (ms: number) => new Date(ms).toISOString().slice(0, 16);
  const preview = await client.get(`/console/subscriptions/${subscription.id}/recover?since=${minute(at - 60 * 60_000)}&until=${minute(Date.now() + 60_000)}`);
  const hidden = (name: string) => new RegExp(`name="${name}" value="([^"]+)"`).exec(preview.text)![1]!;
  const form = { form_key: hidden("form_key"), since: hidden("since"), until: hidden("until") };
  const answers = await sentTwice(`/console/subscriptions/${subscription.id}/recover`, form);
  expect(redirectsOf(answers)).toEqual([
    [303, "/console/subscriptions?recovered=2"],
    [303, "/console/subscriptions?recovered=2"],
  ]);
});

test("the delete confirm form deletes the subscription, and both answers lead to the list saying so, not to a 404", async () => {
  const subscription = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/deleted-twice", events: ["contact.created"] })).data;
  const shown = await client.get(`/console/subscriptions/${subscription.id}/delete`);
  const form = { form_key: formKeyOf(shown.text) };
  const answers = await sentTwice(`/console/subscriptions/${subscription.id}/delete`, form);
  expect(redirectsOf(answers)).toEqual([
    [303, "/console/subscriptions?deleted=1"],
    [303, "/console/subscriptions?deleted=1"],
  ]);
  // A delete of what is not there, without the first sending's answer, is still the 404 page.
  const unknown = await client.post(`/console/subscriptions/sub_01M8000000000000000000NOPE/delete`, { form_key: crypto.randomUUID() });
  expect(unknown.status).toBe(404);
});

test("the revoke confirmation revokes the token, and both answers lead to the list saying so, not to a 404", async () => {
  const { info } = await createApiToken(server.runtime.db, "revoked twice");
  await client.get(`/console/tokens/${info.id}/revoke`);
  const answers = await sentTwice(`/console/tokens/${info.id}/revoke`, {});
  expect(redirectsOf(answers)).toEqual([
    [303, "/console/tokens?revoked=1"],
    [303, "/console/tokens?revoked=1"],
  ]);
  const unknown = await client.post("/console/tokens/tok_01M8000000000000000000NOPE/revoke", {});
  expect([unknown.status, /<p>([^<]*)<\/p>/.exec(unknown.text)?.[1]]).toEqual([404, "No API token with id &quot;tok_01M8000000000000000000NOPE&quot; exists."]);
});

test("the remove-operator confirmation removes the operator, and both answers lead to the list saying so, not to a 404", async () => {
  const other = await addOperator(server.runtime.db, { email: "removed-twice@example.com", password: "a long enough password" });
  const shown = await client.get(`/console/operators/${other.id}/remove`);
  const form = { form_key: formKeyOf(shown.text) };
  const answers = await sentTwice(`/console/operators/${other.id}/remove`, form);
  expect(redirectsOf(answers)).toEqual([
    [303, "/console/operators?removed=1"],
    [303, "/console/operators?removed=1"],
  ]);
  expect(await server.runtime.db.all("SELECT email FROM operators WHERE email = ?", [other.email])).toEqual([]);
  const unknown = await client.post(`/console/operators/${other.id}/remove`, { form_key: crypto.randomUUID() });
  expect(unknown.status).toBe(404);
});

/** shownLink is the one-time link the operators page shows after an invitation or a reset, or null. */
const shownLink = (html: string) => /id="operator-link"[^>]*value="([^"]+)"/.exec(html)?.[1]?.replaceAll("&amp;", "&") ?? null;

/** codeOf is a one-time link's code. */
const codeOf = (link: string | null) => new URL(link!).searchParams.get("code")!;

test("the invite form makes one link: sent twice, or again as a reload does, it shows that link, which still works; with another email it is 409", async () => {
  const invite = { form_key: formKeyOf((await client.get("/console/operators")).text), email: "invited.twice@example.com" };
  const answers = [...(await sentTwice("/console/operators", invite)), await client.post("/console/operators", invite)];
  const link = shownLink(answers[0]!.text);
  expect(link).toContain("/console/welcome?code=");
  expect(answers.map((a) => [a.status, shownLink(a.text)])).toEqual([
    [201, link],
    [201, link],
    [201, link],
  ]);
  expect(await operatorLink(server.runtime.db, codeOf(link))).toEqual({ purpose: "invite", email: "invited.twice@example.com", operator_exists: false });
  const other = await client.post("/console/operators", { ...invite, email: "someone.else@example.com" });
  expect([other.status, shownLink(other.text)]).toEqual([409, null]);
  expect(await operatorLink(server.runtime.db, codeOf(link))).not.toBeNull();
});

test("the reset-link confirmation makes one link: sent twice, or again as a reload does, it shows that link, which still works", async () => {
  const other = await addOperator(server.runtime.db, { email: "reset-twice@example.com", password: "a long enough password" });
  const form = { form_key: formKeyOf((await client.get(`/console/operators/${other.id}/reset-password`)).text) };
  const answers = [...(await sentTwice(`/console/operators/${other.id}/reset-password`, form)), await client.post(`/console/operators/${other.id}/reset-password`, form)];
  const link = shownLink(answers[0]!.text);
  expect(answers.map((a) => [a.status, shownLink(a.text)])).toEqual([
    [201, link],
    [201, link],
    [201, link],
  ]);
  expect(await operatorLink(server.runtime.db, codeOf(link))).toEqual({ purpose: "reset", email: "reset-twice@example.com", operator_exists: true });
});

const DAY_MS = 24 * 60 * 60 * 1000;

/** forgetFormAnswer ages a console form's kept answer past its 24 hours, as if the form were sent again a day later. */
const forgetFormAnswer = (formKey: string) => server.runtime.db.write((tx) => tx.run("UPDATE idempotency_keys SET created_at = created_at - ? WHERE idem_key = ?", [DAY_MS + 60_000, formKey]));

/** useLink sets a new password, or chooses a first one, through a one-time link; returns the answer's status. */
async function useLink(code: string, password: string): Promise<number> {
  const browser = new ConsoleClient((request) => fetch(request, { redirect: "manual" }), server.url);
  await browser.get(`/console/welcome?code=${code}`);
  return (await browser.post("/console/welcome", { code, password, password_again: password })).status;
}

test("a used reset link stays used when its confirmation is sent again after the form's 24 hours: that makes a new link, and the used one never works again", async () => {
  const other = await addOperator(server.runtime.db, { email: "reset-a-day-later@example.com", password: "a long enough password" });
  const form = { form_key: formKeyOf((await client.get(`/console/operators/${other.id}/reset-password`)).text) };
  const link = shownLink((await client.post(`/console/operators/${other.id}/reset-password`, form)).text);
  expect(await useLink(codeOf(link), "their new password")).toBe(303);
  await forgetFormAnswer(form.form_key);
  const again = await client.post(`/console/operators/${other.id}/reset-password`, form);
  const newer = shownLink(again.text);
  expect({ status: again.status, same: newer === link, used: await operatorLink(server.runtime.db, codeOf(link)), newer: await operatorLink(server.runtime.db, codeOf(newer)) }).toEqual({
    status: 201,
    same: false,
    used: null,
    newer: { purpose: "reset", email: "reset-a-day-later@example.com", operator_exists: true },
  });
  expect(await useLink(codeOf(link), "someone else's password")).toBe(403);
});

test("a link form's answer kept by an earlier version (its code derived, not kept) shows no link when sent again: 410, and nothing is replaced", async () => {
  const other = await addOperator(server.runtime.db, { email: "reset-before-upgrade@example.com", password: "a long enough password" });
  const form = { form_key: formKeyOf((await client.get(`/console/operators/${other.id}/reset-password`)).text) };
  const link = shownLink((await client.post(`/console/operators/${other.id}/reset-password`, form)).text);
  await server.runtime.db.write((tx) => tx.run("UPDATE idempotency_keys SET response_body = ? WHERE idem_key = ?", [JSON.stringify({ operator: { id: other.id, email: other.email } }), form.form_key]));
  const again = await client.post(`/console/operators/${other.id}/reset-password`, form);
  expect([again.status, /<h1>([^<]*)<\/h1>/.exec(again.text)?.[1], /<p>([^<]*)<\/p>/.exec(again.text)?.[1], shownLink(again.text)]).toEqual([
    410,
    "No longer available",
    "This form was already sent, and the link it made cannot be shown again. Load the page again to make a new link.",
    null,
  ]);
  expect(await operatorLink(server.runtime.db, codeOf(link))).toEqual({ purpose: "reset", email: "reset-before-upgrade@example.com", operator_exists: true });
});

test("an accepted invitation stays used when its form is sent again after the form's 24 hours, its operator removed since: that makes a new invitation, not the old link again", async () => {
  const invite = { form_key: formKeyOf((await client.get("/console/operators")).text), email: "invited-a-day-later@example.com" };
  const link = shownLink((await client.post("/console/operators", invite)).text);
  expect(await useLink(codeOf(link), "the invitee's password")).toBe(303);
  const id = (await server.runtime.db.get<{ id: string }>("SELECT id FROM operators WHERE email = ?", [invite.email]))!.id;
  const confirm = await client.get(`/console/operators/${id}/remove`);
  expect((await client.post(`/console/operators/${id}/remove`, { form_key: formKeyOf(confirm.text) })).status).toBe(303);
  await forgetFormAnswer(invite.form_key);
  const again = await client.post("/console/operators", invite);
  const newer = shownLink(again.text);
  expect([again.status, newer === link, await operatorLink(server.runtime.db, codeOf(link))]).toEqual([201, false, null]);
  expect(await useLink(codeOf(link), "back with the old link")).toBe(403);
});
