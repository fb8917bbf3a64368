import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  LIMIT_TABLE,
  MAX_CUSTOM_FIELDS,
  MAX_DOMAIN_LENGTH,
  MAX_EMAIL_LENGTH,
  MAX_EVENTS_PER_SUBSCRIPTION,
  MAX_NAME_LENGTH,
  MAX_PHONE_LENGTH,
  MAX_RELATED_IDS,
  MAX_SUBSCRIPTION_DESCRIPTION_LENGTH,
  MAX_TAGS,
  MAX_TAG_LENGTH,
  MAX_TARGET_URL_LENGTH,
} from "../../server/limits/limits.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { dereference } from "../support/openapi.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

describe("limits documentation", () => {
  test("the README's Limits table has every row of server/limits/limits.ts, as it is there", () => {
    const readme = readFileSync(join(import.meta.dir, "..", "..", "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("## Limits"), readme.indexOf("\n## ", readme.indexOf("## Limits") + 1));
    const missing = LIMIT_TABLE.map((row) => `| ${row.limit} | ${row.value} | ${row.answer} |`).filter((line) => !section.includes(`${line}\n`));
    expect(missing).toEqual([]);
  });

  test("the OpenAPI request schemas carry the limits as maxLength, maxItems and maxProperties", async () => {
    const doc = (await h.json("GET", "/docs/json")).body;
    const body = (path: string) => dereference(doc, doc.paths[path].post.requestBody.content["application/json"].schema).properties;
    const contact = body("/public/v1/contacts");
    expect({
      first_name: contact.first_name.maxLength,
      last_name: contact.last_name.maxLength,
      email: contact.email.maxLength,
      phone: contact.phone.maxLength,
      tags: [contact.tags.maxItems, contact.tags.items.maxLength],
      custom_fields: contact.custom_fields.maxProperties,
      account_ids: contact.account_ids.maxItems,
    }).toEqual({
      first_name: MAX_NAME_LENGTH,
      last_name: MAX_NAME_LENGTH,
      email: MAX_EMAIL_LENGTH,
      phone: MAX_PHONE_LENGTH,
      tags: [MAX_TAGS, MAX_TAG_LENGTH],
      custom_fields: MAX_CUSTOM_FIELDS,
      account_ids: MAX_RELATED_IDS,
    });
    const account = body("/public/v1/accounts");
    expect([account.name.maxLength, account.domain.anyOf?.[0]?.maxLength ?? account.domain.maxLength]).toEqual([MAX_NAME_LENGTH, MAX_DOMAIN_LENGTH]);
    const subscription = body("/public/v1/webhook-subscriptions");
    expect([subscription.target_url.maxLength, subscription.description.maxLength, subscription.events.maxItems]).toEqual([
      MAX_TARGET_URL_LENGTH,
      MAX_SUBSCRIPTION_DESCRIPTION_LENGTH,
      MAX_EVENTS_PER_SUBSCRIPTION,
    ]);
  });
});
