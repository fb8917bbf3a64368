import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { databaseArgs } from "../support/backend.ts";
import { afterBlockingCommand, createHarness, type Harness } from "../support/harness.ts";
import { addOperator, ConsoleClient, formKeyOf, OPERATOR } from "./support.ts";

// Who made each API token and webhook subscription (migration 0045), so that removing an operator
// for cause can find what they left behind: the console's operator, the command line, or the API
// token a subscription was created with. What was made before is unknown (null).

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const COLLEAGUE = { email: "colleague@example.com", password: "another long password" };

/** setup starts an app (receivers on 127.0.0.1 allowed) with two operators, a console client signed in as each. */
async function setup() {
  harness = await createHarness({ allowPrivateTargets: true });
  const h = harness;
  const ops = await addOperator(h.rt.db);
  const colleague = await addOperator(h.rt.db, COLLEAGUE);
  const client = new ConsoleClient((r) => h.app.handle(r));
  expect((await client.signIn()).status).toBe(303);
  const other = new ConsoleClient((r) => h.app.handle(r));
  expect((await other.signIn(COLLEAGUE)).status).toBe(303);
  return { h, client, other, ops, colleague };
}

/** tokenCommand runs `crm token ...` on the harness's database. */
async function tokenCommand(h: Harness, args: string[]) {
  const child = Bun.spawnSync([process.execPath, join(import.meta.dir, "../../server/main.ts"), "token", ...args, ...databaseArgs(h.rt.config)]);
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
    expect((await tokenCommand(h, ["create", "--name", "made on the command line"])).code).toBe(0);
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
  const rows = [...html.matchAll(new RegExp(`<tr ${idAttribute}="([^"]+)">([\\s\\S]*?)</tr>`, "g"))];
  return Object.fromEntries(rows.map(([, id, row]) => [id, textOf(/<td data-label="Made by">([\s\S]*?)<\/td>/.exec(row!)![1]!)]));
}

/** textOf is an HTML fragment's text as read: tags dropped, entities of the console's pages decoded. */
const textOf = (html: string) => html.replace(/<[^>]+>/g, "").replaceAll("&amp;", "&").replace(/\s+/g, " ").trim();

describe("the console shows who made each", () => {
  test("token and subscription, on the tokens page, the Subscriptions page and a subscription's page: the operator (removed once they are), the command line, the API token by name and start, unknown for one made before", async () => {
    const { h, client, other, colleague } = await setup();
    const colleagueToken = await tokenOnConsole(other, "colleague's");
    expect((await tokenCommand(h, ["create", "--name", "from a shell"])).code).toBe(0);
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
      [overApi]: `API token colleague's (${prefix}…)`,
    });
    const madeByLine = async (subscription: string) => textOf(/<p class="muted" id="made-by">([\s\S]*?)<\/p>/.exec((await client.get(`/console/subscriptions/${subscription}`)).text)![1]!);
    expect([await madeByLine(mine), await madeByLine(theirs), await madeByLine(overApi)]).toEqual([`Made by ${OPERATOR.email}`, `Made by ${COLLEAGUE.email} (removed)`, `Made by API token colleague's (${prefix}…)`]);
    // One made before the service recorded makers (migration 0045) is unknown.
    await h.rt.db.run("UPDATE webhook_subscriptions SET created_by = NULL, created_by_email = NULL WHERE id = ?", [mine]);
    expect(await madeByLine(mine)).toBe("Made by unknown");
  });
});
