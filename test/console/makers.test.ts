import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { databaseArgs, sqliteOnly } from "../support/backend.ts";
import { tablesHolding } from "../support/personal-data.ts";
import { findToken } from "../../server/auth/service.ts";
import { lockDataDirectory } from "../../server/db/database.ts";
import type { Config } from "../../server/config.ts";
import type { Database } from "../../server/db/sql.ts";
import { changeMakerOf, type ChangeMaker } from "../../server/shared/made-by.ts";
import { SecretBox } from "../../server/webhooks/secrets.ts";
import { resetSecretsKey } from "../../server/webhooks/service.ts";
import { afterBlockingCommand, createHarness, type Harness, type HarnessOptions } from "../support/harness.ts";
import { startReceiver, waitFor } from "../webhooks/support.ts";
import { addOperator, ConsoleClient, formKeyOf, OPERATOR } from "./support.ts";

// Who made each API token and webhook subscription (migration 0047), so that removing an operator
// for cause can find what they left behind: the console's operator, the command line, or the API
// token a subscription was created with. What was made before is unknown (null).

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const COLLEAGUE = { email: "colleague@example.com", password: "another long password" };

/** setup starts an app (receivers on 127.0.0.1 allowed, unless `config` says otherwise) with two operators, a console client signed in as each. */
async function setup(config: Partial<Config> = { allowPrivateTargets: true }, options: HarnessOptions = {}) {
  harness = await createHarness(config, options);
  const h = harness;
  const ops = await addOperator(h.rt.db);
  const colleague = await addOperator(h.rt.db, COLLEAGUE);
  const client = new ConsoleClient((r) => h.app.handle(r));
  expect((await client.signIn()).status).toBe(303);
  const other = new ConsoleClient((r) => h.app.handle(r));
  expect((await other.signIn(COLLEAGUE)).status).toBe(303);
  return { h, client, other, ops, colleague };
}

/** crm runs a `crm` command on the harness's database. */
async function crm(h: Harness, args: string[]) {
  const child = Bun.spawnSync([process.execPath, join(import.meta.dir, "../../server/main.ts"), ...args, ...databaseArgs(h.rt.config)]);
  await afterBlockingCommand();
  return { code: child.exitCode, out: child.stdout.toString(), err: child.stderr.toString() };
}

/** createOnConsole creates an API token on the tokens page and returns it. */
async function tokenOnConsole(client: ConsoleClient, name: string): Promise<string> {
  await client.get("/console/tokens");
  const created = await client.post("/console/tokens", { name });
  expect(created.status).toBe(201);
  return /id="new-token"[^>]*value="([^"]+)"/.exec(created.text)![1]!;
}

/** subscriptionOnConsole creates a subscription with the Subscriptions page's form and returns its id. */
async function subscriptionOnConsole(h: Harness, client: ConsoleClient, path: string): Promise<string> {
  const page = await client.get("/console/subscriptions");
  const created = await client.post("/console/subscriptions", { form_key: formKeyOf(page.text), target_url: `http://127.0.0.1:9/${path}`, description: path, events: ["contact.created"], max_rate: "" });
  expect(created.status).toBe(201);
  return (await h.rt.db.get<{ id: string }>("SELECT id FROM webhook_subscriptions WHERE description = ?", [path]))!.id;
}

/** subscriptionOverApi creates a subscription through the API with `token` and returns its id. */
async function subscriptionOverApi(h: Harness, token: string, path: string): Promise<string> {
  const created = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: `http://127.0.0.1:9/${path}`, description: path, events: ["contact.created"] }, headers: { authorization: `Bearer ${token}` } });
  expect(created.status).toBe(201);
  return created.body.data.id;
}

const tokenMakers = (h: Harness) => h.rt.db.all("SELECT name, created_by, created_by_email FROM api_tokens ORDER BY created_at, id");
const subscriptionMakers = (h: Harness) => h.rt.db.all("SELECT description, created_by, created_by_email FROM webhook_subscriptions ORDER BY created_at, id");
const tokenIdOf = async (h: Harness, name: string) => (await h.rt.db.get<{ id: string }>("SELECT id FROM api_tokens WHERE name = ?", [name]))!.id;

describe("who made a token or a subscription", () => {
  test("is recorded for each way of making one: the console's operator (with their email), the command line, the API token a subscription was created with; unknown for one made without", async () => {
    const { h, client, ops } = await setup();
    const consoleToken = await tokenOnConsole(client, "made on the console");
    expect((await crm(h, ["token", "create", "--name", "made on the command line"])).code).toBe(0);
    await subscriptionOnConsole(h, client, "console-form");
    const old = await subscriptionOverApi(h, h.token, "over-the-api");
    await subscriptionOverApi(h, consoleToken, "with-the-console-token");
    // The rotation wizard's step 2 makes the new subscription too.
    await client.get(`/console/rotations/new?from=${old}`);
    const rotated = await client.post("/console/rotations", { from: old, target_url: "http://127.0.0.1:9/rotation", description: "rotation", events: ["contact.created"], max_rate: "" });
    expect(rotated.status).toBe(201);

    const harnessToken = await tokenIdOf(h, "test");
    expect(await tokenMakers(h)).toEqual([
      { name: "test", created_by: null, created_by_email: null },
      { name: "made on the console", created_by: ops.id, created_by_email: OPERATOR.email },
      { name: "made on the command line", created_by: "cli", created_by_email: null },
    ]);
    expect(await subscriptionMakers(h)).toEqual([
      { description: "console-form", created_by: ops.id, created_by_email: OPERATOR.email },
      { description: "over-the-api", created_by: harnessToken, created_by_email: null },
      { description: "with-the-console-token", created_by: await tokenIdOf(h, "made on the console"), created_by_email: null },
      { description: "rotation", created_by: ops.id, created_by_email: OPERATOR.email },
    ]);
  });
});

/** madeByCells reads, from a page's table, each row's "Made by" cell as text, by the row's id (its `data-*-id`). */
function madeByCells(html: string, idAttribute: string): Record<string, string> {
  const rows = [...html.matchAll(new RegExp(`<tr [^>]*\\b${idAttribute}="([^"]+)"[^>]*>([\\s\\S]*?)</tr>`, "g"))];
  return Object.fromEntries(rows.map(([, id, row]) => [id, textOf(/<td data-label="Made by">([\s\S]*?)<\/td>/.exec(row!)![1]!)]));
}

/** textOf is an HTML fragment's text as read: tags dropped, entities of the console's pages decoded. */
const textOf = (html: string) => html.replace(/<[^>]+>/g, "").replaceAll("&amp;", "&").replace(/\s+/g, " ").trim();

describe("the console shows who made each", () => {
  test("token and subscription, on the tokens page, the Subscriptions page and a subscription's page: the operator (removed once they are), the command line, the API token by name and start, unknown for one made before", async () => {
    const { h, client, other, colleague } = await setup();
    const colleagueToken = await tokenOnConsole(other, "colleague's");
    expect((await crm(h, ["token", "create", "--name", "from a shell"])).code).toBe(0);
    const mine = await subscriptionOnConsole(h, client, "mine");
    const theirs = await subscriptionOnConsole(h, other, "theirs");
    const overApi = await subscriptionOverApi(h, colleagueToken, "over-the-api");
    const id = (name: string) => tokenIdOf(h, name);
    const prefix = colleagueToken.slice(0, 12);
    // Removed plainly, as `crm operator remove` does: what they made stays, and says whose it was.
    const removal = await client.get(`/console/operators/${colleague.id}/remove`);
    expect((await client.post(`/console/operators/${colleague.id}/remove`, { form_key: formKeyOf(removal.text) })).status).toBe(303);

    expect(madeByCells((await client.get("/console/tokens")).text, "data-token-id")).toEqual({
      [await id("test")]: "unknown",
      [await id("colleague's")]: `${COLLEAGUE.email} (removed)`,
      [await id("from a shell")]: "command line",
    });
    expect(madeByCells((await client.get("/console/subscriptions")).text, "data-subscription-id")).toEqual({
      [mine]: OPERATOR.email,
      [theirs]: `${COLLEAGUE.email} (removed)`,
      [overApi]: `API token colleague's (${prefix}…) (${await id("colleague's")})`,
    });
    const madeByLine = async (subscription: string) => textOf(/<p class="muted" id="made-by">([\s\S]*?)<\/p>/.exec((await client.get(`/console/subscriptions/${subscription}`)).text)![1]!);
    expect([await madeByLine(mine), await madeByLine(theirs), await madeByLine(overApi)]).toEqual([`Made by ${OPERATOR.email}`, `Made by ${COLLEAGUE.email} (removed)`, `Made by API token colleague's (${prefix}…) (${await id("colleague's")})`]);
    // One made before the service recorded makers (migration 0047) is unknown.
    await h.rt.db.run("UPDATE webhook_subscriptions SET created_by = NULL, created_by_email = NULL WHERE id = ?", [mine]);
    expect(await madeByLine(mine)).toBe("Made by unknown");
  });
});

/** listed reads the items of a list on a page, by its id, as text (a label's parts, in spans of their own, apart). */
const listed = (html: string, id: string) =>
  [...(new RegExp(`<ul id="${id}">([\\s\\S]*?)</ul>`).exec(html)?.[1] ?? "").matchAll(/<li>([\s\S]*?)<\/li>/g)].map(([, item]) => textOf(item!.replace(/<\/?span[^>]*>/g, " ")));

/** madeByColleague has the colleague make a token and a subscription on the console and a subscription with that token, beside a token of the command line and subscriptions of others. */
async function madeByColleague(h: Harness, client: ConsoleClient, other: ConsoleClient) {
  const token = await tokenOnConsole(other, "colleague's");
  expect((await crm(h, ["token", "create", "--name", "from a shell"])).code).toBe(0);
  const theirs = await subscriptionOnConsole(h, other, "theirs");
  const withTheirToken = await subscriptionOverApi(h, token, "with-their-token");
  const mine = await subscriptionOnConsole(h, client, "mine");
  const overApi = await subscriptionOverApi(h, h.token, "over-the-api");
  return { token, theirs, withTheirToken, mine, overApi };
}

const tokenStates = async (h: Harness) => (await h.rt.db.all<{ name: string; revoked_at: number | null }>("SELECT name, revoked_at FROM api_tokens ORDER BY created_at, id")).map((t) => ({ name: t.name, revoked: t.revoked_at !== null }));
const subscriptionStates = async (h: Harness) =>
  (await h.rt.db.all<{ description: string; status: string; disabled_reason: string | null; disabled_by: string | null }>("SELECT description, status, disabled_reason, disabled_by FROM webhook_subscriptions ORDER BY created_at, id")).map((s) => ({ ...s, disabled_by: changeMakerOf(s.disabled_by) }));
const contactsWith = async (h: Harness, token: string) => (await h.request("GET", "/public/v1/contacts", { headers: { authorization: `Bearer ${token}` } })).status;

/** expectTheirsStopped checks a removal with both boxes ticked: the colleague's token revoked (401), their two subscriptions disabled by `madeBy`, each subscription.disabled made by request `requestId` and `madeBy`; the others' left alone. */
async function expectTheirsStopped(h: Harness, made: Awaited<ReturnType<typeof madeByColleague>>, requestId: string | null, madeBy: ChangeMaker) {
  expect(await contactsWith(h, made.token)).toBe(401);
  expect(await tokenStates(h)).toEqual([
    { name: "test", revoked: false },
    { name: "colleague's", revoked: true },
    { name: "from a shell", revoked: false },
  ]);
  expect(await subscriptionStates(h)).toEqual([
    { description: "theirs", status: "disabled", disabled_reason: "the operator who made it was removed from the console; enable it if it is still wanted", disabled_by: madeBy },
    { description: "with-their-token", status: "disabled", disabled_reason: "the operator who made the API token it was created with was removed from the console; enable it if it is still wanted", disabled_by: madeBy },
    { description: "mine", status: "active", disabled_reason: null, disabled_by: null },
    { description: "over-the-api", status: "active", disabled_reason: null, disabled_by: null },
  ]);
  const events = await h.rt.db.all<{ payload: string; request_id: string | null; token_id: string | null; made_by: string | null }>("SELECT payload, request_id, token_id, made_by FROM events WHERE type = 'subscription.disabled' ORDER BY id");
  expect(events.map((e) => [JSON.parse(e.payload).data.subscription_id, e.request_id, e.token_id, changeMakerOf(e.made_by)])).toEqual([
    [made.theirs, requestId, null, madeBy],
    [made.withTheirToken, requestId, null, madeBy],
  ]);
}

describe("removing an operator", () => {
  test("the confirmation lists the tokens and subscriptions they made; ticked, the removal revokes those tokens (the next request with one is 401) and disables their active subscriptions, with subscription.disabled made by its request", async () => {
    const { h, client, other, ops, colleague } = await setup();
    const made = await madeByColleague(h, client, other);
    const prefix = made.token.slice(0, 12);
    const confirm = await client.get(`/console/operators/${colleague.id}/remove`);
    expect(confirm.status).toBe(200);
    expect(listed(confirm.text, "their-tokens").map((item) => item.replace(/, created .*/, ""))).toEqual([`colleague's (${prefix}…)`]);
    expect(listed(confirm.text, "their-subscriptions")).toEqual(["theirs http://127.0.0.1:9/theirs Active", `with-their-token http://127.0.0.1:9/with-their-token Active created with their API token colleague's (${prefix}…)`]);
    // Opt-in: neither box is ticked as the page comes.
    expect([...confirm.text.matchAll(/<input type="checkbox" name="([a-z_]+)" value="yes"\s*\/?>/g)].map(([, name]) => name)).toEqual(["revoke_tokens", "disable_subscriptions"]);

    const removed = await client.post(`/console/operators/${colleague.id}/remove`, { form_key: formKeyOf(confirm.text), revoke_tokens: "yes", disable_subscriptions: "yes" });
    expect([removed.status, removed.headers.get("location")]).toEqual([303, "/console/operators?removed=1&revoked=1&disabled=2"]);
    const notice = textOf(/<div class="notice[^"]*"[^>]*>([\s\S]*?)<\/div>/.exec((await client.get(removed.headers.get("location")!)).text)![1]!);
    expect(notice).toBe("Operator removed. Their sessions have ended, and the links they made no longer work. 1 API token they made is revoked (requests with it get 401); 2 subscriptions they made are disabled.");
    await expectTheirsStopped(h, made, removed.headers.get("x-request-id"), { kind: "operator", id: ops.id, email: OPERATOR.email });
    // Sent again (a double click), the confirmation answers as the first did.
    const again = await client.post(`/console/operators/${colleague.id}/remove`, { form_key: formKeyOf(confirm.text), revoke_tokens: "yes", disable_subscriptions: "yes" });
    expect([again.status, again.headers.get("location")]).toEqual([303, "/console/operators?removed=1&revoked=1&disabled=2"]);
  });

  test("the disable names no operator: its reason, in the subscriptions' JSON, the deliveries and the subscription.disabled a receiver gets, leaves out the removed operator's email, which the console's Made by still shows", async () => {
    const { h, client, other, colleague } = await setup();
    const made = await madeByColleague(h, client, other);
    // An on-call system outside, told of every disable.
    const receiver = startReceiver();
    try {
      const watcher = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: receiver.url, events: ["subscription.disabled"] } });
      expect(watcher.status).toBe(201);
      h.rt.deliveries.start();
      const confirm = await client.get(`/console/operators/${colleague.id}/remove`);
      expect((await client.post(`/console/operators/${colleague.id}/remove`, { form_key: formKeyOf(confirm.text), disable_subscriptions: "yes" })).status).toBe(303);
      await waitFor(() => receiver.received.length >= 2, "the receiver to get both subscription.disabled");
      const sent = receiver.received.map((r) => r.json.data).sort((a, b) => (a.subscription_id < b.subscription_id ? -1 : 1));
      const disabled = (id: string, path: string, made: string) => ({
        subscription_id: id,
        target_url: `http://127.0.0.1:9/${path}`,
        description: path,
        reason: `the operator who made ${made} was removed from the console; enable it if it is still wanted`,
        disabled_at: expect.any(String),
        failing_since: null,
        pending_deliveries_failed: 0,
      });
      expect(sent).toEqual([disabled(made.theirs, "theirs", "it"), disabled(made.withTheirToken, "with-their-token", "the API token it was created with")]);

      // Any API token reads these: the subscriptions, the deliveries and the bodies they send.
      const deliveries = (await h.json("GET", `/public/v1/webhook-deliveries?subscription_id=${watcher.body.data.id}`)).body.data as { id: string }[];
      expect(deliveries.length).toBe(2);
      const paths = [`/public/v1/webhook-subscriptions/${made.theirs}`, `/public/v1/webhook-subscriptions/${made.withTheirToken}`, "/public/v1/webhook-subscriptions", "/public/v1/webhook-deliveries", ...deliveries.map((d) => `/public/v1/webhook-deliveries/${d.id}`)];
      const answers = await Promise.all(paths.map(async (path) => ({ path, text: await (await h.request("GET", path)).text() })));
      expect(answers.filter((answer) => answer.text.includes(COLLEAGUE.email)).map((answer) => answer.path)).toEqual([]);
      expect(receiver.received.filter((r) => r.body.includes(COLLEAGUE.email))).toEqual([]);
      // The console, which only operators read, still says whose it was.
      const madeBy = /<p class="muted" id="made-by">([\s\S]*?)<\/p>/.exec((await client.get(`/console/subscriptions/${made.theirs}`)).text)![1]!;
      expect(textOf(madeBy)).toBe(`Made by ${COLLEAGUE.email} (removed)`);
    } finally {
      await h.rt.deliveries.stop(0);
      await receiver.stop();
    }
  });

  test("unticked, the removal leaves what they made as it was: their token still works and their subscriptions stay active", async () => {
    const { h, client, other, colleague } = await setup();
    const made = await madeByColleague(h, client, other);
    const confirm = await client.get(`/console/operators/${colleague.id}/remove`);
    const removed = await client.post(`/console/operators/${colleague.id}/remove`, { form_key: formKeyOf(confirm.text) });
    expect([removed.status, removed.headers.get("location")]).toEqual([303, "/console/operators?removed=1"]);
    expect(await contactsWith(h, made.token)).toBe(200);
    expect((await subscriptionStates(h)).map((s: any) => s.status)).toEqual(["active", "active", "active", "active"]);
  });

  test("nobody but a signed-in operator, with the page's CSRF token, can remove one with what they made: no session, no CSRF token or an API token change nothing", async () => {
    const { h, client, other, colleague } = await setup();
    const made = await madeByColleague(h, client, other);
    const confirm = await client.get(`/console/operators/${colleague.id}/remove`);
    const form = { form_key: formKeyOf(confirm.text), revoke_tokens: "yes", disable_subscriptions: "yes" };
    const path = `/console/operators/${colleague.id}/remove`;
    const stranger = new ConsoleClient((r) => h.app.handle(r));
    await stranger.get("/console/login"); // a pre-session CSRF token, as a browser not signed in holds
    const unsigned = await stranger.post(path, form);
    expect([unsigned.status, unsigned.headers.get("location")]).toEqual([303, "/console/login"]);
    expect((await client.post(path, { ...form, _csrf: null })).status).toBe(403);
    const body = new URLSearchParams(form).toString();
    const bearer = await h.app.handle(new Request(`http://localhost${path}`, { method: "POST", headers: { authorization: `Bearer ${made.token}`, "content-type": "application/x-www-form-urlencoded" }, body }));
    expect(bearer.status).toBe(303);
    expect(bearer.headers.get("location")).toStartWith("/console/login");
    expect(await h.rt.db.get("SELECT email FROM operators WHERE id = ?", [colleague.id])).toEqual({ email: COLLEAGUE.email });
    expect(await contactsWith(h, made.token)).toBe(200);
    expect((await subscriptionStates(h)).map((s: any) => s.status)).toEqual(["active", "active", "active", "active"]);
  });
});

/** gate is a promise opened by hand, for holding a request at a chosen point. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** heldLookups is a name resolver (every name a public address; the delivery loop never runs, so nothing is sent there) whose next lookup `hold` keeps waiting until released. */
function heldLookups() {
  let held: { reached: () => void; released: Promise<void> } | null = null;
  const resolve = async (_host: string) => {
    const lookup = held;
    held = null;
    if (lookup) {
      lookup.reached();
      await lookup.released;
    }
    return ["93.184.216.34"];
  };
  return {
    network: { resolve },
    hold() {
      const reached = gate();
      const released = gate();
      held = { reached: reached.open, released: released.opened };
      return { reached: reached.opened, release: released.open };
    },
  };
}

/** holdNextSessionRead keeps the next console request waiting once it has read its session (signed in), until released: it stands between its sign-in check and what it does. */
function holdNextSessionRead(db: Database) {
  const get = db.get;
  const reached = gate();
  const released = gate();
  db.get = (async (sql: string, params?: readonly unknown[]) => {
    const row = await get.call(db, sql, params as never);
    if (!sql.includes("FROM operator_sessions")) return row;
    db.get = get;
    reached.open();
    await released.opened;
    return row;
  }) as typeof db.get;
  return { reached: reached.opened, release: released.open };
}

/** removeColleague removes them on the console with the confirmation's `boxes` ticked. */
async function removeColleague(client: ConsoleClient, id: string, boxes: Record<string, string> = {}) {
  const confirm = await client.get(`/console/operators/${id}/remove`);
  expect((await client.post(`/console/operators/${id}/remove`, { form_key: formKeyOf(confirm.text), ...boxes })).status).toBe(303);
}

describe("what an operator makes while being removed", () => {
  test("a subscription their API token is creating (its target's name being looked up) when the removal revokes the token is refused as the token's next request is, 401, and not stored", async () => {
    const lookups = heldLookups();
    const { h, client, other, colleague } = await setup({}, { network: lookups.network });
    const token = await tokenOnConsole(other, "colleague's bot");
    const create = () => h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "https://slow-dns.example.net/hook", events: ["contact.deleted"] }, headers: { authorization: `Bearer ${token}` } });
    const held = lookups.hold();
    const creating = create();
    await held.reached;
    await removeColleague(client, colleague.id, { revoke_tokens: "yes", disable_subscriptions: "yes" });
    held.release();
    const created = await creating;
    const next = await create();
    expect(next.status).toBe(401);
    expect([created.status, created.body, created.headers.get("www-authenticate")]).toEqual([401, next.body, next.headers.get("www-authenticate")]);
    expect(await subscriptionMakers(h)).toEqual([]);
  });

  test("a subscription they are creating on the console (its target's name being looked up) when they are removed is not stored: the form is answered as a signed-out one, sent to sign in", async () => {
    const lookups = heldLookups();
    const { h, client, other, colleague } = await setup({}, { network: lookups.network });
    const page = await other.get("/console/subscriptions");
    const held = lookups.hold();
    const creating = other.post("/console/subscriptions", { form_key: formKeyOf(page.text), target_url: "https://slow-dns.example.net/theirs", description: "theirs", events: ["contact.deleted"], max_rate: "" });
    await held.reached;
    // Unticked: the removal disables nothing, yet what a removed operator was making is not made.
    await removeColleague(client, colleague.id);
    held.release();
    const created = await creating;
    expect([created.status, created.headers.get("location")]).toEqual([303, "/console/login"]);
    expect(await subscriptionMakers(h)).toEqual([]);
  });

  test("a rotation's new subscription they are creating on the console when they are removed is not stored: sent to sign in, the old subscription left alone", async () => {
    const lookups = heldLookups();
    const { h, client, other, colleague } = await setup({}, { network: lookups.network });
    const old = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "https://hooks.example.net/old", description: "old", events: ["contact.deleted"] } });
    expect(old.status).toBe(201);
    await other.get(`/console/rotations/new?from=${old.body.data.id}`);
    const held = lookups.hold();
    const rotating = other.post("/console/rotations", { from: old.body.data.id, target_url: "https://slow-dns.example.net/new", description: "new", events: ["contact.deleted"], max_rate: "" });
    await held.reached;
    await removeColleague(client, colleague.id);
    held.release();
    const rotated = await rotating;
    expect([rotated.status, rotated.headers.get("location")]).toEqual([303, "/console/login"]);
    expect(await subscriptionMakers(h)).toEqual([{ description: "old", created_by: await tokenIdOf(h, "test"), created_by_email: null }]);
  });

  test("an API token they are creating on the tokens page when they are removed is not stored: the form is answered as a signed-out one, sent to sign in", async () => {
    const { h, client, other, colleague } = await setup();
    await other.get("/console/tokens");
    const held = holdNextSessionRead(h.rt.db);
    const creating = other.post("/console/tokens", { name: "made in the removal's moment" });
    await held.reached;
    await removeColleague(client, colleague.id, { revoke_tokens: "yes" });
    held.release();
    const created = await creating;
    expect([created.status, created.headers.get("location")]).toEqual([303, "/console/login"]);
    expect(await tokenMakers(h)).toEqual([{ name: "test", created_by: null, created_by_email: null }]);
  });
});

describe("the links an operator makes while being removed", () => {
  // Their removal withdraws the links they made; one stored after it would let someone in for 72 hours, listed as the command line's.
  const forms = [
    { link: "an invitation", form: () => ({ page: "/console/operators", post: "/console/operators", fields: { email: "their.friend@example.com" } }) },
    { link: "a password-reset link for a colleague", form: (ops: { id: string }) => ({ page: `/console/operators/${ops.id}/reset-password`, post: `/console/operators/${ops.id}/reset-password`, fields: {} }) },
  ];
  for (const { link, form } of forms) {
    test(`${link} they are making on the console when they are removed is not stored: they are sent to sign in, and nothing is pending`, async () => {
      const { h, client, other, ops, colleague } = await setup();
      const { page, post, fields } = form(ops);
      const shown = await other.get(page);
      const held = holdNextSessionRead(h.rt.db);
      const making = other.post(post, { form_key: formKeyOf(shown.text), ...fields });
      await held.reached;
      await removeColleague(client, colleague.id);
      held.release();
      const made = await making;
      expect([made.status, made.headers.get("location")]).toEqual([303, "/console/login"]);
      expect(await h.rt.db.all("SELECT purpose, email FROM operator_links")).toEqual([]);
    });
  }
});

/** madeByListed reads `crm token list`'s "made by" of each token, by its id. */
function madeByListed(out: string): Record<string, string> {
  return Object.fromEntries(out.trim().split("\n").map((line) => [line.split("  ")[0]!, /  made by (.*?)(?:  rate |  revoked |$)/.exec(line)![1]!]));
}

describe("on the command line", () => {
  test("`token list` says who made each token as the console's Made by does: the operator by email, (removed) once they are, command line, unknown", async () => {
    const { h, client, other, colleague } = await setup();
    await tokenOnConsole(client, "mine");
    await tokenOnConsole(other, "colleague's");
    expect((await crm(h, ["token", "create", "--name", "from a shell"])).code).toBe(0);
    await removeColleague(client, colleague.id);
    const listed = await crm(h, ["token", "list"]);
    expect([listed.code, listed.err]).toEqual([0, ""]);
    const id = (name: string) => tokenIdOf(h, name);
    expect(madeByListed(listed.out)).toEqual({
      [await id("test")]: "unknown",
      [await id("mine")]: OPERATOR.email,
      [await id("colleague's")]: `${COLLEAGUE.email} (removed)`,
      [await id("from a shell")]: "command line",
    });
    expect(madeByListed(listed.out)).toEqual(madeByCells((await client.get("/console/tokens")).text, "data-token-id"));
  });

  // Without the switches what they made stays, listed as the console's confirmation lists it; with both, it is what the console's ticked boxes do, in the removal's write, subscription.disabled made by no request.
  const removals = [
    {
      switches: [],
      said: ["1 API token they made stays active (revoke it with crm token revoke ID):", "2 subscriptions they made, or created with one of their API tokens, stay as they are (pause, disable or delete them on the console's Subscriptions page or with the API):"],
      status: "active",
    },
    {
      switches: ["--revoke-tokens", "--disable-subscriptions"],
      said: [
        "revoked 1 API token they made (requests with it get 401):",
        "disabled 2 subscriptions they made, or created with one of their API tokens (nothing more is sent to them and their pending deliveries end failed; Enable on the console's Subscriptions page, or POST .../enable, brings one back):",
      ],
      status: "disabled",
    },
  ];
  for (const { switches, said, status } of removals) {
    test(`\`operator remove ${switches.join(" ") || "(no switch)"}\` removes them and says, for each token and subscription they made, what it did or that it stays`, async () => {
      const { h, client, other, colleague } = await setup();
      const made = await madeByColleague(h, client, other);
      const removed = await crm(h, ["operator", "remove", "--email", COLLEAGUE.email, ...switches]);
      const token = (await findToken(h.rt.db, await tokenIdOf(h, "colleague's")))!;
      expect(removed).toEqual({
        code: 0,
        out: [
          `removed operator ${colleague.id} (${COLLEAGUE.email}); their sessions have ended, and the links they made no longer work`,
          said[0],
          `  ${token.id}  ${token.prefix}…  colleague's  created ${token.created_at}  last used ${token.last_used_at}`,
          said[1],
          `  ${made.theirs}  ${status}  http://127.0.0.1:9/theirs  theirs`,
          `  ${made.withTheirToken}  ${status}  http://127.0.0.1:9/with-their-token  with-their-token  created with their API token colleague's (${token.prefix}…)`,
          "",
        ].join("\n"),
        err: "",
      });
      expect(await h.rt.db.get("SELECT email FROM operators WHERE id = ?", [colleague.id])).toBeNull();
      if (switches.length > 0) return expectTheirsStopped(h, made, null, { kind: "command_line", command: "operator remove" });
      expect(await contactsWith(h, made.token)).toBe(200);
      expect((await subscriptionStates(h)).map((s: any) => s.status)).toEqual(["active", "active", "active", "active"]);
    });
  }

  test("`operator remove` with one switch does that one and lists what stays; an operator who made nothing is said to have made nothing", async () => {
    const { h, client, other, colleague } = await setup();
    const made = await madeByColleague(h, client, other);
    const removed = await crm(h, ["operator", "remove", "--email", COLLEAGUE.email, "--disable-subscriptions"]);
    const token = (await findToken(h.rt.db, await tokenIdOf(h, "colleague's")))!;
    expect(removed.out.split("\n").filter((line) => !line.startsWith("  "))).toEqual([
      `removed operator ${colleague.id} (${COLLEAGUE.email}); their sessions have ended, and the links they made no longer work`,
      "1 API token they made stays active (revoke it with crm token revoke ID):",
      "disabled 2 subscriptions they made, or created with one of their API tokens (nothing more is sent to them and their pending deliveries end failed; Enable on the console's Subscriptions page, or POST .../enable, brings one back):",
      "",
    ]);
    expect([removed.code, removed.err, await contactsWith(h, made.token), token.revoked_at]).toEqual([0, "", 200, null]);
    const idle = await addOperator(h.rt.db, { email: "idle@example.com", password: "an idle operator's password" });
    expect(await crm(h, ["operator", "remove", "--email", "IDLE@example.com", "--revoke-tokens", "--disable-subscriptions"])).toEqual({
      code: 0,
      out: [
        `removed operator ${idle.id} (idle@example.com); their sessions have ended, and the links they made no longer work`,
        "they made no API token still active",
        "they made no subscription, themselves or with one of their API tokens",
        "",
      ].join("\n"),
      err: "",
    });
  });

  sqliteOnly("`operator remove --disable-subscriptions` is refused while a serve holds the data directory, which would send the subscription.disabled events only at its next change; nothing is changed", async () => {
    const { h, client, other, colleague } = await setup();
    await madeByColleague(h, client, other);
    const unlock = lockDataDirectory(h.rt.config.dataDir)!;
    try {
      const refused = await crm(h, ["operator", "remove", "--email", COLLEAGUE.email, "--disable-subscriptions"]);
      expect([refused.code, refused.out]).toEqual([2, ""]);
      expect(refused.err).toEndWith(": remove them on the console with \"Also disable their active subscriptions\" ticked, which sends subscription.disabled at once, or stop it first\n");
      expect(await h.rt.db.get("SELECT email FROM operators WHERE id = ?", [colleague.id])).toEqual({ email: COLLEAGUE.email });
      // Revoking alone queues nothing: it works beside the serve, as `crm token revoke` does.
      expect((await crm(h, ["operator", "remove", "--email", COLLEAGUE.email, "--revoke-tokens"])).code).toBe(0);
    } finally {
      unlock();
    }
  });
});

/** factOf reads, from an event's page, what its facts say under `term`, as text, and the address it links, if any. */
function factOf(html: string, term: string): { text: string; href: string | null } {
  const fact = new RegExp(`<dt>${term}</dt>\\s*<dd>([\\s\\S]*?)</dd>`).exec(html)![1]!;
  return { text: textOf(fact), href: /<a href="([^"]+)"/.exec(fact)?.[1] ?? null };
}

/** lineOf reads a paragraph of a page by its id, as text, and the address it links, if any; null when the page has none. */
function lineOf(html: string, id: string): { text: string; href: string | null } | null {
  const line = new RegExp(`<p class="muted" id="${id}">([\\s\\S]*?)</p>`).exec(html)?.[1];
  return line === undefined ? null : { text: textOf(line), href: /<a href="([^"]+)"/.exec(line)?.[1] ?? null };
}

/** changeMakers reads who paused, disabled and last changed a subscription, as stored. */
async function changeMakers(h: Harness, id: string) {
  const row = (await h.rt.db.get<{ paused_by: string | null; disabled_by: string | null; updated_by: string | null }>("SELECT paused_by, disabled_by, updated_by FROM webhook_subscriptions WHERE id = ?", [id]))!;
  return { paused_by: changeMakerOf(row.paused_by), disabled_by: changeMakerOf(row.disabled_by), updated_by: changeMakerOf(row.updated_by) };
}

const shownTime = (iso: string) => `${iso.slice(0, 19).replace("T", " ")} UTC`;

describe("who made a change", () => {
  test("each event records its maker: the API token, the console's operator, the command (named), the delivery loop, and who erased it; the event's page says so, linking the token or operator", async () => {
    const { h, client, ops } = await setup();
    const tokenId = await tokenIdOf(h, "test");
    const prefix = h.token.slice(0, 12);
    const receiver = startReceiver();
    try {
      // A receiver that is gone: the delivery loop disables its subscription.
      receiver.respond(() => new Response("gone", { status: 410 }));
      const gone = (await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: receiver.url, description: "gone", events: ["contact.created"] } })).body.data.id;
      const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", email: "ada@example.com" }, headers: { "x-request-id": "import-row-1" } });
      expect(created.status).toBe(201);
      h.rt.deliveries.start();
      await waitFor(async () => (await h.rt.db.get<{ status: string }>("SELECT status FROM webhook_subscriptions WHERE id = ?", [gone]))?.status === "disabled", "the 410 to disable the subscription");
    } finally {
      await h.rt.deliveries.stop(0);
      await receiver.stop();
    }
    const contact = (await h.json("GET", "/public/v1/contacts?email=ada@example.com")).body.data[0].id;
    const confirm = await client.get(`/console/contacts/${contact}/delete`);
    const deleted = await client.post(`/console/contacts/${contact}/delete`, { form_key: formKeyOf(confirm.text) });
    expect(deleted.status).toBe(303);
    const user = (await h.json("POST", "/public/v1/users", { body: { email: "owner@example.com", name: "Owner" } })).body.data.id;
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Grace", assigned_user_id: user } })).status).toBe(201);
    expect((await crm(h, ["user", "delete", user])).code).toBe(0);
    expect((await crm(h, ["contact", "erase", contact])).code).toBe(0);

    const api: ChangeMaker = { kind: "api_token", id: tokenId };
    const operator: ChangeMaker = { kind: "operator", id: ops.id, email: OPERATOR.email };
    const rows = await h.rt.db.all<{ id: string; type: string; request_id: string | null; token_id: string | null; made_by: string | null; erased_by: string | null }>("SELECT id, type, request_id, token_id, made_by, erased_by FROM events ORDER BY created_at, id");
    expect(rows.map(({ id: _, ...e }) => ({ ...e, made_by: changeMakerOf(e.made_by), erased_by: changeMakerOf(e.erased_by) }))).toEqual([
      { type: "contact.created", request_id: "import-row-1", token_id: tokenId, made_by: api, erased_by: { kind: "command_line", command: "contact erase" } },
      { type: "subscription.disabled", request_id: null, token_id: null, made_by: { kind: "delivery_loop" }, erased_by: null },
      { type: "contact.deleted", request_id: deleted.headers.get("x-request-id"), token_id: null, made_by: operator, erased_by: null },
      { type: "contact.created", request_id: expect.any(String), token_id: tokenId, made_by: api, erased_by: null },
      { type: "contact.updated", request_id: null, token_id: null, made_by: { kind: "command_line", command: "user delete" }, erased_by: null },
    ]);
    expect(await changeMakers(h, (await h.rt.db.get<{ id: string }>("SELECT id FROM webhook_subscriptions WHERE description = 'gone'"))!.id)).toEqual({ paused_by: null, disabled_by: { kind: "delivery_loop" }, updated_by: { kind: "delivery_loop" } });

    const page = async (i: number) => (await client.get(`/console/events/${rows[i]!.id}`)).text;
    const first = await page(0);
    expect(factOf(first, "Made by")).toEqual({ text: `API token test (${prefix}…) (${tokenId})`, href: `/console/tokens#${tokenId}` });
    expect(textOf(/<p class="payload-erased">([\s\S]*?)<\/p>/.exec(first)![1]!)).toStartWith("Erased ");
    expect(textOf(/<p class="payload-erased">([\s\S]*?)<\/p>/.exec(first)![1]!)).toEndWith(" by command line (crm contact erase), after its contact or account was deleted: nothing of the record is kept, shown or sent any more.");
    expect(factOf(await page(1), "Made by")).toEqual({ text: "the delivery loop", href: null });
    expect(factOf(await page(2), "Made by")).toEqual({ text: OPERATOR.email, href: `/console/operators#${ops.id}` });
    expect(factOf(await page(4), "Made by")).toEqual({ text: "command line (crm user delete)", href: null });
    // The link finds the operator's row.
    expect((await client.get("/console/operators")).text).toContain(`<tr id="${ops.id}" data-operator-id="${ops.id}">`);
    // An event recorded before migration 0052 by an API request still names its token; one by no request, nobody.
    await h.rt.db.run("UPDATE events SET made_by = NULL");
    expect([factOf(await page(0), "Made by"), factOf(await page(4), "Made by")]).toEqual([
      { text: `API token test (${prefix}…) (${tokenId})`, href: `/console/tokens#${tokenId}` },
      { text: "unknown", href: null },
    ]);
  });

  test("who paused, disabled and last changed a subscription is recorded: the API says which kind of maker, the subscription's page names them, linking the token or operator", async () => {
    const { h, client, other, ops } = await setup();
    const tokenId = await tokenIdOf(h, "test");
    const prefix = h.token.slice(0, 12);
    const api: ChangeMaker = { kind: "api_token", id: tokenId };
    const operator: ChangeMaker = { kind: "operator", id: ops.id, email: OPERATOR.email };
    const sub = await subscriptionOverApi(h, h.token, "watched");
    const theirs = await subscriptionOnConsole(h, other, "theirs");
    expect(await changeMakers(h, sub)).toEqual({ paused_by: null, disabled_by: null, updated_by: api });
    const subscriptionPage = async (id: string) => (await client.get(`/console/subscriptions/${id}`)).text;

    await subscriptionPage(sub);
    expect((await client.post(`/console/subscriptions/${sub}/pause`, {})).status).toBe(303);
    expect(await changeMakers(h, sub)).toEqual({ paused_by: operator, disabled_by: null, updated_by: operator });
    const paused = (await h.json("GET", `/public/v1/webhook-subscriptions/${sub}`)).body.data;
    expect(paused).toEqual({
      id: sub,
      target_url: "http://127.0.0.1:9/watched",
      description: "watched",
      events: ["contact.created"],
      status: "paused",
      disabled_at: null,
      disabled_reason: null,
      disabled_by: null,
      paused_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      paused_by: "operator",
      max_rate: null,
      failing_since: null,
      held_until: null,
      secret: expect.stringMatching(/^whsec_.{4}…$/),
      secret_rotated_at: null,
      previous_secret_expires_at: null,
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      updated_at: paused.paused_at,
    });
    let shown = await subscriptionPage(sub);
    expect([lineOf(shown, "paused-by"), lineOf(shown, "changed-by")]).toEqual([
      { text: `Paused by ${OPERATOR.email}`, href: `/console/operators#${ops.id}` },
      { text: `Last changed at ${shownTime(paused.updated_at)} by ${OPERATOR.email}`, href: `/console/operators#${ops.id}` },
    ]);

    // Resumed and paused again through the API, its description edited on the console, its secret rotated through the API.
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/resume`)).body.data).toMatchObject({ status: "active", paused_by: null });
    expect(await changeMakers(h, sub)).toEqual({ paused_by: null, disabled_by: null, updated_by: api });
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/pause`)).body.data).toMatchObject({ status: "paused", paused_by: "api_token" });
    shown = await subscriptionPage(sub);
    expect(lineOf(shown, "paused-by")).toEqual({ text: `Paused by API token test (${prefix}…) (${tokenId})`, href: `/console/tokens#${tokenId}` });
    expect((await client.post(`/console/subscriptions/${sub}/edit`, { description: "watched closely" })).status).toBe(303);
    expect(await changeMakers(h, sub)).toEqual({ paused_by: api, disabled_by: null, updated_by: operator });
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${sub}/rotate-secret`, { body: {} })).status).toBe(200);
    expect(await changeMakers(h, sub)).toEqual({ paused_by: api, disabled_by: null, updated_by: api });

    // Disabled by a command (their maker removed), enabled on the console, disabled by the secrets key's reset.
    expect((await crm(h, ["operator", "remove", "--email", COLLEAGUE.email, "--disable-subscriptions"])).code).toBe(0);
    const removal: ChangeMaker = { kind: "command_line", command: "operator remove" };
    expect(await changeMakers(h, theirs)).toEqual({ paused_by: null, disabled_by: removal, updated_by: removal });
    const disabled = (await h.json("GET", `/public/v1/webhook-subscriptions/${theirs}`)).body.data;
    expect([disabled.status, disabled.disabled_by, disabled.paused_by]).toEqual(["disabled", "command_line", null]);
    expect(lineOf(await subscriptionPage(theirs), "disabled-by")).toEqual({
      text: `Disabled at ${shownTime(disabled.disabled_at)} by command line (crm operator remove): the operator who made it was removed from the console; enable it if it is still wanted`,
      href: null,
    });
    expect((await client.post(`/console/subscriptions/${theirs}/enable`, {})).status).toBe(303);
    expect(await changeMakers(h, theirs)).toEqual({ paused_by: null, disabled_by: null, updated_by: operator });
    expect(lineOf(await subscriptionPage(theirs), "disabled-by")).toBeNull();
    const reset = await resetSecretsKey(h.rt.db, new SecretBox(new Uint8Array(32).fill(9)));
    expect(typeof reset).not.toBe("string");
    const command: ChangeMaker = { kind: "command_line", command: "secrets-key reset" };
    expect([await changeMakers(h, sub), await changeMakers(h, theirs)]).toEqual([
      // A reset disables a paused subscription too; its pause stays recorded.
      { paused_by: api, disabled_by: command, updated_by: command },
      { paused_by: null, disabled_by: command, updated_by: command },
    ]);
  });
});

describe("forgetting a removed operator", () => {
  test("`operator forget` replaces their email wherever it is kept (who made a token or subscription, who paused, disabled or changed one, who made or erased an event) in one write, saying what it changed; the console says an operator (removed, forgotten); a current operator is refused", async () => {
    const { h, client, other, colleague } = await setup();
    const third = await addOperator(h.rt.db, { email: "third@example.com", password: "a third long password" });
    const thirdClient = new ConsoleClient((r) => h.app.handle(r));
    expect((await thirdClient.signIn({ email: "third@example.com", password: "a third long password" })).status).toBe(303);
    // The colleague makes a token and a subscription, pauses it, removes an operator disabling what they made, deletes and erases a contact.
    const token = await tokenOnConsole(other, "colleague's");
    const theirs = await subscriptionOnConsole(h, other, "theirs");
    await other.get(`/console/subscriptions/${theirs}`);
    expect((await other.post(`/console/subscriptions/${theirs}/pause`, {})).status).toBe(303);
    const thirds = await subscriptionOnConsole(h, thirdClient, "third's");
    const removeThird = await other.get(`/console/operators/${third.id}/remove`);
    expect((await other.post(`/console/operators/${third.id}/remove`, { form_key: formKeyOf(removeThird.text), disable_subscriptions: "yes" })).status).toBe(303);
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", email: "ada@example.com" } })).body.data.id;
    const confirmDelete = await other.get(`/console/contacts/${contact}/delete`);
    expect((await other.post(`/console/contacts/${contact}/delete`, { form_key: formKeyOf(confirmDelete.text) })).status).toBe(303);
    const confirmErase = await other.get(`/console/contacts/${contact}/erase`);
    expect((await other.post(`/console/contacts/${contact}/erase`, { form_key: formKeyOf(confirmErase.text) })).status).toBe(303);
    const before = await tablesHolding(h.rt.db, [COLLEAGUE.email]);
    expect(Object.keys(before[COLLEAGUE.email]!).sort()).toEqual(["api_tokens", "events", "operators", "webhook_subscriptions"]);

    // Still an operator: refused, nothing changed.
    expect(await crm(h, ["operator", "forget", "--email", COLLEAGUE.email])).toEqual({
      code: 2,
      out: "",
      err: `crm: ${COLLEAGUE.email} is a current operator (${colleague.id}): remove them first (crm operator remove --email ${COLLEAGUE.email}); nothing was changed\n`,
    });
    expect(await tablesHolding(h.rt.db, [COLLEAGUE.email])).toEqual(before);

    expect((await crm(h, ["operator", "remove", "--email", COLLEAGUE.email])).code).toBe(0);
    // Typed as it was given to the console: the email is matched as operators' emails are.
    expect(await crm(h, ["operator", "forget", "--email", ` ${COLLEAGUE.email.toUpperCase()} `])).toEqual({
      code: 0,
      out:
        `forgot ${COLLEAGUE.email}, a removed operator's email: where it was kept, each record now says "an operator (removed, forgotten)":\n` +
        "  api_tokens.created_by_email: 1\n" +
        "  webhook_subscriptions.created_by_email: 1\n" +
        "  webhook_subscriptions.paused_by: 1\n" +
        "  webhook_subscriptions.disabled_by: 1\n" +
        "  webhook_subscriptions.updated_by: 2\n" +
        "  events.made_by: 2\n" +
        "  events.erased_by: 1\n",
      err: "",
    });
    expect(await tablesHolding(h.rt.db, [COLLEAGUE.email])).toEqual({ [COLLEAGUE.email]: {} });
    // What they made stays theirs: `operator remove` of another id would still find it.
    expect((await h.rt.db.get<{ created_by: string }>("SELECT created_by FROM webhook_subscriptions WHERE id = ?", [theirs]))!.created_by).toBe(colleague.id);

    const forgotten = "an operator (removed, forgotten)";
    expect(madeByCells((await client.get("/console/tokens")).text, "data-token-id")[await tokenIdOf(h, "colleague's")]).toBe(forgotten);
    expect(madeByCells((await client.get("/console/subscriptions")).text, "data-subscription-id")[theirs]).toBe(forgotten);
    const page = (await client.get(`/console/subscriptions/${theirs}`)).text;
    expect(lineOf(page, "made-by")).toEqual({ text: `Made by ${forgotten}`, href: null });
    expect(lineOf(page, "paused-by")).toEqual({ text: `Paused by ${forgotten}`, href: null });
    expect(lineOf((await client.get(`/console/subscriptions/${thirds}`)).text, "disabled-by")!.text).toContain(` by ${forgotten}: `);
    const deletion = (await h.rt.db.get<{ id: string }>("SELECT id FROM events WHERE type = 'contact.deleted'"))!.id;
    const eventPage = (await client.get(`/console/events/${deletion}`)).text;
    expect(factOf(eventPage, "Made by")).toEqual({ text: forgotten, href: null });
    const created = (await h.rt.db.get<{ id: string }>("SELECT id FROM events WHERE type = 'contact.created'"))!.id;
    expect(textOf(/<p class="payload-erased">([\s\S]*?)<\/p>/.exec((await client.get(`/console/events/${created}`)).text)![1]!)).toContain(` by ${forgotten}, `);
    expect((await crm(h, ["token", "list"])).out).toContain(`  made by ${forgotten}`);
    // The token they made still works: forgetting changes who is named, nothing else.
    expect(await contactsWith(h, token)).toBe(200);

    // Again, or for an email nobody had: nothing holds it.
    expect(await crm(h, ["operator", "forget", "--email", COLLEAGUE.email])).toEqual({ code: 0, out: `nothing kept ${COLLEAGUE.email}: no record names it, so there was nothing to forget\n`, err: "" });
  });
});
