import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { parseSafeJson } from "../../server/http/safe-json.ts";
import { MAX_JSON_DEPTH } from "../../server/limits/limits.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { contactCount, eventTypes } from "../foundation/support.ts";

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const refused = (pointer: string, detail: string) => ({
  type: "urn:crm:problem:invalid-json",
  title: "Bad Request",
  status: 400,
  detail: `The request body is not acceptable JSON: ${pointer || "the body"} ${detail}.`,
  errors: [{ pointer, detail }],
});

/** post sends raw text (or bytes) as a JSON body and returns the parsed answer. */
async function post(body: string | Uint8Array<ArrayBuffer>, path = "/public/v1/contacts") {
  const res = await h.app.handle(
    new Request(`http://localhost${path}`, { method: "POST", headers: { authorization: `Bearer ${h.token}`, "content-type": "application/json" }, body }),
  );
  return { status: res.status, type: res.headers.get("content-type"), body: (await res.json()) as any };
}

const NUL = "contains the NUL character (\\u0000), which no text field can hold";

const nested = (levels: number) => `${'{"a":'.repeat(levels - 1)}{}${"}".repeat(levels - 1)}`;

describe("safe JSON: accepted", () => {
  test(`nesting of exactly ${MAX_JSON_DEPTH} levels is accepted and stored as given`, async () => {
    const body = `{"email":"deep@example.com","deep":${nested(MAX_JSON_DEPTH - 1)}}`;
    const res = await post(body);
    expect(res.status).toBe(201);
    expect(res.body.data.deep).toEqual(JSON.parse(body).deep);
  });

  test("numbers at ±(2^53 - 1), fractions, tiny exponents, zeros and escaped keys are accepted", async () => {
    const res = await post('{"email":"n@example.com","max":9007199254740991,"min":-9007199254740991,"f":0.1,"tiny":1e-300,"least":5e-324,"zero":0e-400,"nought":-0.000e5,"big":1.5e15,"k\\u0065y":"v","emoji":"\\ud83d\\ude00"}');
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({ max: 9007199254740991, min: -9007199254740991, f: 0.1, tiny: 1e-300, least: 5e-324, zero: 0, nought: 0, big: 1.5e15, key: "v", emoji: "😀" });
  });

  test("any JSON without duplicate keys, unsafe numbers or prototype keys parses exactly as JSON.parse does", () => {
    const safeKey = fc.string().filter((k) => !["__proto__", "constructor", "prototype"].includes(k));
    const value = fc.letrec((tie) => ({
      leaf: fc.oneof(fc.string(), fc.boolean(), fc.constant(null), fc.integer(), fc.double({ min: -1e15, max: 1e15, noNaN: true })),
      node: fc.oneof({ depthSize: "small" }, tie("leaf"), fc.array(tie("node"), { maxLength: 4 }), fc.dictionary(safeKey, tie("node"), { maxKeys: 4 })),
    })).node;
    fc.assert(
      fc.property(value, fc.constantFrom(undefined, 2), (v, indent) => {
        const text = JSON.stringify(v, null, indent);
        expect(parseSafeJson(text)).toEqual(JSON.parse(text));
      }),
      { numRuns: 500 },
    );
  });
});

describe("safe JSON: refused with 400, nothing stored", () => {
  const cases: [string, string, ReturnType<typeof refused>][] = [
    ["a duplicate key", '{"first_name":"Ada","first_name":"Eve"}', refused("/first_name", 'appears twice in the same object (duplicate key "first_name")')],
    ["a duplicate key spelled with an escape", '{"custom_fields":{"plan":"a","pl\\u0061n":"b"}}', refused("/custom_fields/plan", 'appears twice in the same object (duplicate key "plan")')],
    ["a duplicate key in a large nested object", `{"x":[1,{${Array.from({ length: 20 }, (_, i) => `"k${i}":${i}`).join(",")},"k7":0}]}`, refused("/x/1/k7", 'appears twice in the same object (duplicate key "k7")')],
    [`nesting of ${MAX_JSON_DEPTH + 1} levels`, `{"deep":${nested(MAX_JSON_DEPTH)}}`, refused(`/deep${"/a".repeat(MAX_JSON_DEPTH - 1)}`, `nests deeper than ${MAX_JSON_DEPTH} levels`)],
    ["2^53", '{"n":9007199254740992}', refused("/n", "is a number beyond ±9007199254740991 (2^53 - 1), past which numbers lose precision; send it as a string")],
    ["a negative unsafe integer in a list", '{"n":[1,-12345678901234567890]}', refused("/n/1", "is a number beyond ±9007199254740991 (2^53 - 1), past which numbers lose precision; send it as a string")],
    ["1e400 (Infinity to JSON.parse)", '{"n":1e400}', refused("/n", "is a number too large to represent (1e400)")],
    ["1e-400 (0 to JSON.parse)", '{"custom_fields":{"x":1e-400}}', refused("/custom_fields/x", "is a number too small to represent (1e-400), which would be stored as 0; send it as a string")],
    ["a long decimal below the smallest double", `{"n":-0.${"0".repeat(400)}1}`, refused("/n", `is a number too small to represent (-0.${"0".repeat(37)}), which would be stored as 0; send it as a string`)],
    ["an unpaired surrogate escape", '{"first_name":"\\ud800x"}', refused("/first_name", "contains an unpaired UTF-16 surrogate escape, which is not valid Unicode")],
    ["a NUL character in a name (PostgreSQL cannot store it, SQLite would)", '{"first_name":"a\\u0000b"}', refused("/first_name", NUL)],
    ["a NUL character in a tag", '{"tags":["vip","\\u0000"]}', refused("/tags/1", NUL)],
    ["a NUL character in a custom field's key", '{"custom_fields":{"plan\\u0000":"pro"}}', refused("/custom_fields", NUL)],
    ["a __proto__ key", '{"__proto__":{"admin":true}}', refused("/__proto__", 'uses the key "__proto__", which is refused to protect object prototypes')],
    ["a constructor key deep inside", '{"custom_fields":{"a":[{"constructor":{"prototype":{"x":1}}}]}}', refused("/custom_fields/a/0/constructor", 'uses the key "constructor", which is refused to protect object prototypes')],
    ["a prototype key", '{"prototype":1}', refused("/prototype", 'uses the key "prototype", which is refused to protect object prototypes')],
    ["an escaped __proto__ key", '{"\\u005f_proto__":{"admin":true}}', refused("/__proto__", 'uses the key "__proto__", which is refused to protect object prototypes')],
  ];
  for (const [name, body, problem] of cases) {
    test(name, async () => {
      const res = await post(body);
      expect(res.status).toBe(400);
      expect(res.type).toBe("application/problem+json");
      expect(res.body).toEqual(problem);
      expect(await contactCount(h)).toBe(0);
      expect(await eventTypes(h)).toEqual([]);
      expect(({} as Record<string, unknown>).admin).toBeUndefined();
    });
  }

  test("bytes that are not UTF-8 are 400 and stored nowhere", async () => {
    const bytes = new Uint8Array([...Buffer.from('{"first_name":"'), 0xc3, 0x28, ...Buffer.from('"}')]);
    const res = await post(bytes);
    expect(res.body).toEqual({ type: "urn:crm:problem:invalid-json", title: "Bad Request", status: 400, detail: "The request body is not valid UTF-8." });
    expect(await contactCount(h)).toBe(0);
  });

  test("an account body is checked the same way", async () => {
    const res = await post('{"name":"Acme","name":"Evil"}', "/public/v1/accounts");
    expect(res.body).toEqual(refused("/name", 'appears twice in the same object (duplicate key "name")'));
    expect((await h.rt.db.get("SELECT count(*) AS n FROM accounts"))).toEqual({ n: 0 });
  });

  test("a NUL character is refused in the body of every route that takes text, a batch item too, and nothing is stored", async () => {
    const bodies: [string, string, string][] = [
      ["/public/v1/contacts/batch", '{"items":[{"email":"a@example.com"},{"first_name":"x\\u0000"}]}', "/items/1/first_name"],
      ["/public/v1/accounts", '{"name":"Acme\\u0000"}', "/name"],
      ["/public/v1/accounts/batch", '{"items":[{"name":"\\u0000"}]}', "/items/0/name"],
      ["/public/v1/users", '{"name":"Grace","email":"g\\u0000@example.com"}', "/email"],
      ["/public/v1/webhook-subscriptions", '{"target_url":"https://example.com/h","events":["contact.created"],"description":"\\u0000"}', "/description"],
    ];
    for (const [path, body, pointer] of bodies) expect(await post(body, path)).toEqual({ status: 400, type: "application/problem+json", body: refused(pointer, NUL) });
    for (const table of ["contacts", "accounts", "users", "webhook_subscriptions"]) expect(await h.rt.db.get(`SELECT count(*) AS n FROM ${table}`)).toEqual({ n: 0 });
  });

  test("malformed JSON keeps JSON.parse's own message", async () => {
    for (const body of ['{"a":', '{"a":1,}', '{"a":01}', "[1,2", '{"a":"\\x"}', '{"a" 1}']) {
      const res = await post(body);
      expect(res.status).toBe(400);
      expect(res.body.type).toBe("urn:crm:problem:invalid-json");
      expect(res.body.detail).toStartWith("The request body is not valid JSON: ");
    }
    expect(await contactCount(h)).toBe(0);
  });
});

describe("safe JSON: hostile shapes", () => {
  test("a megabyte of opening brackets is refused at depth 33 without a stack overflow", async () => {
    const res = await post("[".repeat(1024 * 1024 - 10));
    expect(res.status).toBe(400);
    expect(res.body.errors[0].detail).toBe(`nests deeper than ${MAX_JSON_DEPTH} levels`);
  });

  test("many backslashes and quotes do not trip the string scan", async () => {
    const value = `${'\\"'.repeat(1000)}${"\\\\".repeat(1000)}`;
    const res = await post(`{"email":"q@example.com","note":"${value}","other":"x\\\\"}`);
    expect(res.status).toBe(201);
    expect(res.body.data.note).toBe(`${'"'.repeat(1000)}${"\\".repeat(1000)}`);
    expect(res.body.data.other).toBe("x\\");
  });
});
