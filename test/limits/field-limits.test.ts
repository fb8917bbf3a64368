import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createAccount } from "../../server/accounts/service.ts";
import {
  MAX_BODY_BYTES,
  MAX_CONSENT_BYTES,
  MAX_CUSTOM_FIELDS,
  MAX_CUSTOM_FIELDS_BYTES,
  MAX_CUSTOM_FIELDS_DEPTH,
  MAX_CUSTOM_FIELD_KEY_LENGTH,
  MAX_DOMAIN_LENGTH,
  MAX_EMAIL_LENGTH,
  MAX_EVENTS_PER_SUBSCRIPTION,
  MAX_EXTRA_PROPERTIES_BYTES,
  MAX_HEADER_BYTES,
  MAX_HEADER_FIELDS,
  MAX_NAME_LENGTH,
  MAX_PHONE_LENGTH,
  MAX_QUERY_BYTES,
  MAX_RELATED_IDS,
  MAX_SUBSCRIPTIONS,
  MAX_SUBSCRIPTION_DESCRIPTION_LENGTH,
  MAX_TAGS,
  MAX_TAG_LENGTH,
  MAX_TARGET_URL_LENGTH,
} from "../../server/limits/limits.ts";
import { contactCount, eventTypes, validation } from "../foundation/support.ts";
import { createHarness, UNKNOWN_ORIGIN, type Harness } from "../support/harness.ts";
import { domainOfLength, emailOfLength, stringOfJsonBytes } from "./support.ts";

let h: Harness;
beforeEach(async () => {
  // Some cases below write more than the default write burst; rate limits have their own tests.
  h = await createHarness({ allowPrivateTargets: true, rateWriteBurst: 1000 });
});
afterEach(async () => await h.close());

const count = async (table: string) => (await h.rt.db.get<{ n: number }>(`SELECT count(*) AS n FROM ${table}`))!.n;

/** limitCase posts the accepted and the refused body, checks the refusal's whole problem and that nothing was stored. */
async function limitCase(path: string, atLimit: Record<string, unknown>, overLimit: Record<string, unknown>, errors: Record<string, string>[], table: string) {
  const before = await count(table);
  const refused = await h.json("POST", path, { body: overLimit });
  expect(refused.status).toBe(422);
  expect(refused.headers.get("content-type")).toBe("application/problem+json");
  expect(refused.body).toEqual(validation(errors));
  expect(await count(table)).toBe(before);
  const accepted = await h.json("POST", path, { body: atLimit });
  expect(accepted.status).toBe(201);
  expect(await count(table)).toBe(before + 1);
  return accepted.body.data;
}

// A contact needs a name, email or phone: cases about other fields carry a phone number.
const identified = (body: Record<string, unknown>) => (["first_name", "last_name", "email", "phone"].some((f) => f in body) ? body : { phone: "+1 555 0100", ...body });
const contacts = (at: Record<string, unknown>, over: Record<string, unknown>, errors: Record<string, string>[]) => limitCase("/public/v1/contacts", identified(at), identified(over), errors, "contacts");

describe("field limits: contacts, at the limit accepted, one over refused naming field and limit", () => {
  test(`first_name and last_name: ${MAX_NAME_LENGTH} characters`, async () => {
    const detail = `must be a string of at most ${MAX_NAME_LENGTH} characters, or null`;
    const stored = await contacts({ first_name: "é".repeat(MAX_NAME_LENGTH), last_name: "L".repeat(MAX_NAME_LENGTH) }, { first_name: "F".repeat(MAX_NAME_LENGTH + 1), last_name: "L".repeat(MAX_NAME_LENGTH + 1) }, [
      { pointer: "/first_name", detail },
      { pointer: "/last_name", detail },
    ]);
    expect(stored.first_name).toBe("é".repeat(MAX_NAME_LENGTH));
    expect(await eventTypes(h)).toEqual(["contact.created"]);
  });

  test(`email: ${MAX_EMAIL_LENGTH} characters`, async () => {
    expect(emailOfLength(MAX_EMAIL_LENGTH).length).toBe(MAX_EMAIL_LENGTH);
    await contacts({ email: emailOfLength(MAX_EMAIL_LENGTH) }, { email: emailOfLength(MAX_EMAIL_LENGTH + 1) }, [{ pointer: "/email", detail: `must be an email address of at most ${MAX_EMAIL_LENGTH} characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null` }]);
  });

  test(`phone: ${MAX_PHONE_LENGTH} characters`, async () => {
    await contacts({ phone: "1".repeat(MAX_PHONE_LENGTH) }, { phone: "1".repeat(MAX_PHONE_LENGTH + 1) }, [{ pointer: "/phone", detail: `must be a string of at most ${MAX_PHONE_LENGTH} characters, or null` }]);
  });

  test(`tags: ${MAX_TAGS} tags of up to ${MAX_TAG_LENGTH} characters`, async () => {
    const detail = `must be a list of at most ${MAX_TAGS} distinct tags of 1 to ${MAX_TAG_LENGTH} characters each, none of them "." or ".."`;
    const tags = Array.from({ length: MAX_TAGS }, (_, i) => `${i}`.padEnd(MAX_TAG_LENGTH, "t"));
    await contacts({ tags }, { tags: [...tags, "one more"] }, [{ pointer: "/tags", detail }]);
    await contacts({ tags: ["t".repeat(MAX_TAG_LENGTH)] }, { tags: ["t".repeat(MAX_TAG_LENGTH + 1)] }, [{ pointer: "/tags/0", detail: `must be a tag of 1 to ${MAX_TAG_LENGTH} characters, not "." or ".."` }]);
  });

  test(`account_ids: ${MAX_RELATED_IDS} ids`, async () => {
    const ids: string[] = [];
    for (let i = 0; i <= MAX_RELATED_IDS; i++) ids.push((await createAccount(h.rt, { name: `Account ${i}` }, null, UNKNOWN_ORIGIN)).body.data.id);
    await contacts({ account_ids: ids.slice(0, MAX_RELATED_IDS) }, { account_ids: ids }, [
      { pointer: "/account_ids", detail: `must be a list of at most ${MAX_RELATED_IDS} distinct account ids (acc_...)` },
    ]);
  });

  test(`custom_fields: ${MAX_CUSTOM_FIELDS} keys`, async () => {
    const fields = Object.fromEntries(Array.from({ length: MAX_CUSTOM_FIELDS }, (_, i) => [`field_${i}`, i]));
    const stored = await contacts({ custom_fields: fields }, { custom_fields: { ...fields, one_more: 1 } }, [
      { pointer: "/custom_fields", detail: `has ${MAX_CUSTOM_FIELDS + 1} keys; the limit is ${MAX_CUSTOM_FIELDS}` },
    ]);
    expect(Object.keys(stored.custom_fields)).toHaveLength(MAX_CUSTOM_FIELDS);
  });

  test(`custom_fields: keys of ${MAX_CUSTOM_FIELD_KEY_LENGTH} characters, at any depth`, async () => {
    const key = "k".repeat(MAX_CUSTOM_FIELD_KEY_LENGTH);
    await contacts({ custom_fields: { [key]: { [key]: 1 } } }, { custom_fields: { [key]: { [`${key}k`]: 1 } } }, [
      { pointer: `/custom_fields/${key}/${key}k`, detail: `is a key longer than the limit of ${MAX_CUSTOM_FIELD_KEY_LENGTH} characters` },
    ]);
  });

  test(`custom_fields: ${MAX_CUSTOM_FIELDS_DEPTH} levels of nesting`, async () => {
    const nest = (levels: number): unknown => (levels === 1 ? { leaf: true } : { next: nest(levels - 1) });
    await contacts({ custom_fields: nest(MAX_CUSTOM_FIELDS_DEPTH) }, { custom_fields: nest(MAX_CUSTOM_FIELDS_DEPTH + 1) }, [
      { pointer: "/custom_fields", detail: `nests ${MAX_CUSTOM_FIELDS_DEPTH + 1} levels deep; the limit is ${MAX_CUSTOM_FIELDS_DEPTH}` },
    ]);
    await contacts({ custom_fields: { list: [[[["x"]]]] } }, { custom_fields: { list: [[[[["x"]]]]] } }, [
      { pointer: "/custom_fields", detail: `nests ${MAX_CUSTOM_FIELDS_DEPTH + 1} levels deep; the limit is ${MAX_CUSTOM_FIELDS_DEPTH}` },
    ]);
  });

  test(`custom_fields: ${MAX_CUSTOM_FIELDS_BYTES} bytes as JSON (UTF-8)`, async () => {
    const at = stringOfJsonBytes(MAX_CUSTOM_FIELDS_BYTES, (s) => ({ notes: s }));
    const over = stringOfJsonBytes(MAX_CUSTOM_FIELDS_BYTES + 1, (s) => ({ notes: s }));
    expect(Buffer.byteLength(JSON.stringify(at))).toBe(MAX_CUSTOM_FIELDS_BYTES);
    await contacts({ custom_fields: at }, { custom_fields: over }, [
      { pointer: "/custom_fields", detail: `is ${MAX_CUSTOM_FIELDS_BYTES + 1} bytes as JSON; the limit is ${MAX_CUSTOM_FIELDS_BYTES} bytes (16 KiB)` },
    ]);
    // Two bytes per "é": the size is in UTF-8 bytes, not characters.
    const wide = { notes: "é".repeat(MAX_CUSTOM_FIELDS_BYTES / 2) };
    const res = await h.json("POST", "/public/v1/contacts", { body: { custom_fields: wide } });
    expect(res.body.errors).toEqual([{ pointer: "/custom_fields", detail: `is ${MAX_CUSTOM_FIELDS_BYTES + 12} bytes as JSON; the limit is ${MAX_CUSTOM_FIELDS_BYTES} bytes (16 KiB)` }]);
  });

  test(`consent: ${MAX_CONSENT_BYTES} bytes as JSON`, async () => {
    const at = stringOfJsonBytes(MAX_CONSENT_BYTES, (s) => ({ email: { granted: true, note: s } }));
    const over = stringOfJsonBytes(MAX_CONSENT_BYTES + 1, (s) => ({ email: { granted: true, note: s } }));
    await contacts({ consent: at }, { consent: over }, [{ pointer: "/consent", detail: `is ${MAX_CONSENT_BYTES + 1} bytes as JSON; the limit is ${MAX_CONSENT_BYTES} bytes (4 KiB)` }]);
  });

  test(`further properties: ${MAX_EXTRA_PROPERTIES_BYTES} bytes together, on create`, async () => {
    const at = stringOfJsonBytes(MAX_EXTRA_PROPERTIES_BYTES, (s) => ({ source: "import", notes: s }));
    const over = stringOfJsonBytes(MAX_EXTRA_PROPERTIES_BYTES + 1, (s) => ({ source: "import", notes: s }));
    const stored = await contacts({ first_name: "Ada", tags: ["vip"], ...(at as object) }, { first_name: "Ada", ...(over as object) }, [
      { pointer: "/notes", detail: `further properties come to ${MAX_EXTRA_PROPERTIES_BYTES + 1} bytes as JSON together; the limit is ${MAX_EXTRA_PROPERTIES_BYTES} bytes (64 KiB) (this one is ${MAX_EXTRA_PROPERTIES_BYTES + 1 - 28})` },
    ]);
    expect(stored.source).toBe("import");
  });

  test("further properties: the limit applies to the record a PATCH leaves, and a refused PATCH changes nothing", async () => {
    const half = "x".repeat(MAX_EXTRA_PROPERTIES_BYTES / 2);
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", a: half } });
    const id = created.body.data.id;
    const refused = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { b: half } });
    expect(refused.status).toBe(422);
    expect(refused.body.errors).toEqual([
      { pointer: "/a", detail: `further properties come to ${JSON.stringify({ a: half, b: half }).length} bytes as JSON together; the limit is ${MAX_EXTRA_PROPERTIES_BYTES} bytes (64 KiB) (this one is ${JSON.stringify(half).length})` },
    ]);
    const unchanged = await h.json("GET", `/public/v1/contacts/${id}`);
    expect(unchanged.body.data).toEqual(created.body.data);
    expect(await eventTypes(h)).toEqual(["contact.created"]);
    const replaced = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { a: null, b: half } });
    expect(replaced.status).toBe(200);
    expect(replaced.body.data.b).toBe(half);
    expect(replaced.body.data.a).toBeUndefined();
  });
});

describe("field limits: accounts", () => {
  const accounts = (at: Record<string, unknown>, over: Record<string, unknown>, errors: Record<string, string>[]) => limitCase("/public/v1/accounts", at, over, errors, "accounts");

  test(`name: ${MAX_NAME_LENGTH} characters`, async () => {
    await accounts({ name: "A".repeat(MAX_NAME_LENGTH) }, { name: "A".repeat(MAX_NAME_LENGTH + 1) }, [{ pointer: "/name", detail: `must be a string of 1 to ${MAX_NAME_LENGTH} characters, not spaces alone (an account needs a name)` }]);
  });

  test("email and domain: their length is counted in ASCII form, which a domain in Unicode makes longer than sent, and the refusal says so", async () => {
    // 22 labels of 10 ü: 244 characters as sent, 376 as xn--tdaaaaaaaaaa labels.
    const domain = `${Array(22).fill("ü".repeat(10)).join(".")}.de`;
    const contact = await h.json("POST", "/public/v1/contacts", { body: { email: `a@${domain}` } });
    const account = await h.json("POST", "/public/v1/accounts", { body: { name: "A", domain } });
    expect([`a@${domain}`.length, domain.length]).toEqual([246, 244]);
    expect([contact.status, contact.body, account.status, account.body]).toEqual([
      422,
      validation([{ pointer: "/email", detail: `must be an email address of at most ${MAX_EMAIL_LENGTH} characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null` }]),
      422,
      validation([{ pointer: "/domain", detail: `must be a domain name like example.com of at most ${MAX_DOMAIN_LENGTH} characters, counted in ASCII form (müller.de as xn--mller-kva.de), or null` }]),
    ]);
  });

  test(`domain: ${MAX_DOMAIN_LENGTH} characters`, async () => {
    await accounts({ name: "A", domain: domainOfLength(MAX_DOMAIN_LENGTH) }, { name: "A", domain: domainOfLength(MAX_DOMAIN_LENGTH + 1) }, [{ pointer: "/domain", detail: "must be a domain name like example.com of at most 253 characters, counted in ASCII form (müller.de as xn--mller-kva.de), or null" }]);
  });

  test(`further properties: ${MAX_EXTRA_PROPERTIES_BYTES} bytes together`, async () => {
    const at = stringOfJsonBytes(MAX_EXTRA_PROPERTIES_BYTES, (s) => ({ notes: s }));
    const over = stringOfJsonBytes(MAX_EXTRA_PROPERTIES_BYTES + 1, (s) => ({ notes: s }));
    await accounts({ name: "Acme", ...(at as object) }, { name: "Acme", ...(over as object) }, [
      { pointer: "/notes", detail: `further properties come to ${MAX_EXTRA_PROPERTIES_BYTES + 1} bytes as JSON together; the limit is ${MAX_EXTRA_PROPERTIES_BYTES} bytes (64 KiB) (this one is ${MAX_EXTRA_PROPERTIES_BYTES + 1 - 10})` },
    ]);
  });
});

describe("field limits: webhook subscriptions", () => {
  const kinds = ["contact.created", "contact.updated", "contact.deleted", "account.created", "account.updated", "account.deleted", "webhook.ping", "subscription.disabled", "delivery.exhausted"];
  const subscriptions = (at: Record<string, unknown>, over: Record<string, unknown>, errors: Record<string, string>[]) => limitCase("/public/v1/webhook-subscriptions", at, over, errors, "webhook_subscriptions");

  test(`description: ${MAX_SUBSCRIPTION_DESCRIPTION_LENGTH} characters; target_url: ${MAX_TARGET_URL_LENGTH}`, async () => {
    const base = { target_url: "https://hooks.example.com/crm", events: ["contact.created"] };
    await subscriptions({ ...base, description: "d".repeat(MAX_SUBSCRIPTION_DESCRIPTION_LENGTH) }, { ...base, description: "d".repeat(MAX_SUBSCRIPTION_DESCRIPTION_LENGTH + 1) }, [
      { pointer: "/description", detail: `must be a string of at most ${MAX_SUBSCRIPTION_DESCRIPTION_LENGTH} characters` },
    ]);
    const url = (length: number) => `https://hooks.example.com/${"p".repeat(length - "https://hooks.example.com/".length)}`;
    await subscriptions({ ...base, target_url: url(MAX_TARGET_URL_LENGTH) }, { ...base, target_url: url(MAX_TARGET_URL_LENGTH + 1) }, [
      { pointer: "/target_url", detail: `must be an absolute http or https URL of at most ${MAX_TARGET_URL_LENGTH} characters` },
    ]);
  });

  test(`events: ${MAX_EVENTS_PER_SUBSCRIPTION} event kinds`, async () => {
    expect(kinds).toHaveLength(MAX_EVENTS_PER_SUBSCRIPTION);
    const target_url = "https://hooks.example.com/crm";
    await subscriptions({ target_url, events: kinds }, { target_url, events: [...kinds, "contact.created"] }, [
      { pointer: "/events", detail: "must be a non-empty list of distinct event kinds from: contact.created, contact.updated, contact.deleted, account.created, account.updated, account.deleted, webhook.ping, subscription.disabled, delivery.exhausted" },
    ]);
  });

  test(`subscriptions: ${MAX_SUBSCRIPTIONS} in all; the next is refused until one is deleted`, async () => {
    const ids: string[] = [];
    for (let i = 0; i < MAX_SUBSCRIPTIONS; i++) {
      const res = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: `https://hooks.example.com/${i}`, events: ["contact.created"] } });
      expect(res.status).toBe(201);
      ids.push(res.body.data.id);
    }
    const refused = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "https://hooks.example.com/extra", events: ["contact.created"] } });
    expect(refused.body).toEqual(
      validation([{ pointer: "", detail: `the service already has ${MAX_SUBSCRIPTIONS} webhook subscriptions, the limit; delete one first` }], "Too many webhook subscriptions."),
    );
    expect(await count("webhook_subscriptions")).toBe(MAX_SUBSCRIPTIONS);
    expect((await h.request("DELETE", `/public/v1/webhook-subscriptions/${ids[0]}`)).status).toBe(204);
    const again = await h.json("POST", "/public/v1/webhook-subscriptions", { body: { target_url: "https://hooks.example.com/extra", events: ["contact.created"] } });
    expect(again.status).toBe(201);
  });
});

describe("request size limits", () => {
  const problem = (status: number, slug: string, title: string, detail: string, errors?: unknown) => ({ type: `urn:crm:problem:${slug}`, title, status, detail, ...(errors ? { errors } : {}) });

  test(`query string: ${MAX_QUERY_BYTES} bytes accepted, one more is 414`, async () => {
    const at = await h.request("GET", `/healthz?pad=${"q".repeat(MAX_QUERY_BYTES - 4)}`);
    expect(at.status).toBe(200);
    const over = await h.json("GET", `/public/v1/contacts?email=${"q".repeat(MAX_QUERY_BYTES - 5)}`);
    expect(over.status).toBe(414);
    expect(over.body).toEqual(problem(414, "uri-too-long", "URI Too Long", `The query string is ${MAX_QUERY_BYTES + 1} bytes; the limit is ${MAX_QUERY_BYTES} bytes (4 KiB).`));
  });

  test(`headers: ${MAX_HEADER_BYTES} bytes accepted, one more is 431 naming the largest`, async () => {
    const fixed = "authorization".length + `Bearer ${h.token}`.length + 4 + "x-pad".length + 4;
    const at = await h.request("GET", "/public/v1/contacts", { headers: { "x-pad": "p".repeat(MAX_HEADER_BYTES - fixed) } });
    expect(at.status).toBe(200);
    const padLength = MAX_HEADER_BYTES - fixed + 1;
    const over = await h.json("GET", "/public/v1/contacts", { headers: { "x-pad": "p".repeat(padLength) } });
    expect(over.status).toBe(431);
    const padBytes = "x-pad: ".length + padLength + 2;
    expect(over.body).toEqual(
      problem(431, "headers-too-large", "Request Header Fields Too Large", `The request headers are ${MAX_HEADER_BYTES + 1} bytes; the limit is ${MAX_HEADER_BYTES} bytes (8 KiB). The largest is x-pad (${padBytes} bytes).`, [
        { header: "x-pad", detail: `is ${padBytes} bytes of ${MAX_HEADER_BYTES + 1} in all` },
      ]),
    );
  });

  test(`headers: ${MAX_HEADER_FIELDS} fields accepted, one more is 431`, async () => {
    const fields = (n: number) => Object.fromEntries(Array.from({ length: n - 1 }, (_, i) => [`x-h${i}`, "v"]));
    expect((await h.request("GET", "/public/v1/contacts", { headers: fields(MAX_HEADER_FIELDS) })).status).toBe(200);
    const over = await h.json("GET", "/public/v1/contacts", { headers: fields(MAX_HEADER_FIELDS + 1) });
    expect({ status: over.status, body: over.body }).toEqual({
      status: 431,
      body: problem(431, "headers-too-large", "Request Header Fields Too Large", `The request has ${MAX_HEADER_FIELDS + 1} header fields; the limit is ${MAX_HEADER_FIELDS}.`),
    });
  });

  test(`body: one byte over ${MAX_BODY_BYTES} is 413 and nothing is stored`, async () => {
    const res = await h.json("POST", "/public/v1/contacts", { body: `{"a":"x"${" ".repeat(MAX_BODY_BYTES - 8)}}` });
    expect(res.body).toEqual(problem(413, "body-too-large", "Content Too Large", `The request body exceeds the limit of ${MAX_BODY_BYTES} bytes (1 MiB).`));
    expect(await contactCount(h)).toBe(0);
  });
});
