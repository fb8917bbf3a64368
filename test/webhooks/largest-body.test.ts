import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import {
  MAX_CONSENT_BYTES,
  MAX_CUSTOM_FIELDS_BYTES,
  MAX_DOMAIN_LENGTH,
  MAX_EMAIL_LENGTH,
  MAX_EXTERNAL_ID_LENGTH,
  MAX_EXTRA_PROPERTIES_BYTES,
  MAX_NAME_LENGTH,
  MAX_PHONE_LENGTH,
  MAX_RELATED_IDS,
  MAX_TAGS,
  MAX_TAG_LENGTH,
} from "../../server/limits/limits.ts";
import { domainOfLength, emailOfLength, stringOfJsonBytes } from "../limits/support.ts";
import { waitFor, webhookTestScope } from "./support.ts";

// The README tells receivers how large a delivery's body can be, so they can size their body limit
// (Express's express.raw() takes 100 kB unless told more). A contact within every limit can send
// much more than that: these build the largest contact and account and check the bound holds.
const scope = webhookTestScope();

/** statedBound is the largest body the README's "The request" says a delivery has, in bytes. */
function statedBound(): number {
  const readme = readFileSync(join(import.meta.dir, "..", "..", "README.md"), "utf8");
  const request = readme.slice(readme.indexOf("**The request.**"), readme.indexOf("A receiver in TypeScript"));
  return Number(/A body is at most \d+ KiB \(([\d,]+) bytes\)/.exec(request)![1]!.replaceAll(",", ""));
}

/**
 * ESCAPED are characters JSON sends as six bytes each (\u0001): control characters, which the API
 * takes in names, phones, tags and external ids, other than those with a short escape (\n, \t, ...)
 * and those String#trim would take for spaces.
 */
const ESCAPED = [...Array.from({ length: 7 }, (_, i) => 0x01 + i), ...Array.from({ length: 18 }, (_, i) => 0x0e + i)].map((code) => String.fromCharCode(code));

/** escapedText is `length` characters JSON sends as six bytes each, starting with the digits of `n` in base 25, so texts of different `n` differ. */
const escapedText = (length: number, n = 0) => [ESCAPED[Math.floor(n / ESCAPED.length)]!, ESCAPED[n % ESCAPED.length]!].join("").padEnd(length, ESCAPED[0]);

test("the largest contact and the largest account a receiver can be sent stay within the body size the README states, and verify", async () => {
  const h = await scope.harness({ rateWriteBurst: 1000 });
  const batch = await h.json("POST", "/public/v1/accounts/batch", { body: { items: Array.from({ length: MAX_RELATED_IDS }, (_, i) => ({ name: `Account ${i}` })) } });
  const accountIds = batch.body.data.map((result: { id: string }) => result.id);
  const userIds = [];
  for (let i = 0; i < MAX_RELATED_IDS; i++) userIds.push((await h.json("POST", "/public/v1/users", { body: { name: `User ${i}`, email: `user${i}@example.com` } })).body.data.id);
  // Subscribed after the accounts above, so the account.created it gets is the largest account's.
  const r = scope.receiver();
  const sub = await h.subscribe(r.url, ["contact.created", "account.created"]);

  const contact = await h.json("POST", "/public/v1/contacts", {
    body: {
      first_name: escapedText(MAX_NAME_LENGTH),
      last_name: escapedText(MAX_NAME_LENGTH, 1),
      email: emailOfLength(MAX_EMAIL_LENGTH),
      phone: escapedText(MAX_PHONE_LENGTH),
      external_id: escapedText(MAX_EXTERNAL_ID_LENGTH),
      tags: Array.from({ length: MAX_TAGS }, (_, i) => escapedText(MAX_TAG_LENGTH, i)),
      custom_fields: stringOfJsonBytes(MAX_CUSTOM_FIELDS_BYTES, (s) => ({ notes: s })),
      consent: stringOfJsonBytes(MAX_CONSENT_BYTES, (s) => ({ basis: s })),
      account_ids: accountIds,
      assigned_user_id: userIds[0],
      assigned_user_ids: userIds,
      ...(stringOfJsonBytes(MAX_EXTRA_PROPERTIES_BYTES, (s) => ({ legacy_notes: s })) as object),
    },
  });
  const account = await h.json("POST", "/public/v1/accounts", {
    body: { name: escapedText(MAX_NAME_LENGTH), domain: domainOfLength(MAX_DOMAIN_LENGTH), ...(stringOfJsonBytes(MAX_EXTRA_PROPERTIES_BYTES, (s) => ({ legacy_notes: s })) as object) },
  });
  const sizes = async (type: string) => {
    const got = await waitFor(() => r.received.find((one) => one.json?.type === type), type);
    new Webhook(sub.secret).verify(got.body, got.headers);
    return Buffer.byteLength(got.body);
  };
  const contactBytes = await sizes("contact.created");
  const accountBytes = await sizes("account.created");
  const bound = statedBound();
  expect({ created: [contact.status, account.status], contactWithin: contactBytes <= bound, accountWithin: accountBytes <= bound }).toEqual({
    created: [201, 201],
    contactWithin: true,
    accountWithin: true,
  });
}, 60_000);
