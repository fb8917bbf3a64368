import { afterAll, beforeAll, expect, test } from "bun:test";
import { createHarness, type Harness } from "../support/harness.ts";
import { addOperator, ConsoleClient } from "./support.ts";

// A contact's and an account's console pages, without a browser: each answers only for an id of its kind.
let h: Harness;
let client: ConsoleClient;

beforeAll(async () => {
  h = await createHarness();
  await addOperator(h.rt.db);
  client = new ConsoleClient((r) => h.app.handle(r));
  expect((await client.signIn()).status).toBe(303);
});
afterAll(() => h.close());

test("a deleted contact's id is no account, nor a deleted account's a contact: each page of the other kind is 404 and offers no Erase", async () => {
  await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "http://127.0.0.1:9/hooks", events: ["contact.created", "account.created"] } });
  const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Kind", email: "kind@example.com" } })).body.data;
  const account = (await h.json("POST", "/public/v1/accounts", { body: { name: "Kind Ltd" } })).body.data;
  await h.json("DELETE", `/public/v1/contacts/${contact.id}`);
  await h.json("DELETE", `/public/v1/accounts/${account.id}`);
  const pages = await Promise.all(
    [`/console/contacts/${contact.id}`, `/console/accounts/${account.id}`, `/console/accounts/${contact.id}`, `/console/contacts/${account.id}`].map(async (path) => {
      const page = await client.get(path);
      return [page.status, page.text.includes("Erase its events")];
    }),
  );
  expect(pages).toEqual([
    [200, true],
    [200, true],
    [404, false],
    [404, false],
  ]);
});
