import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createOperator } from "../../server/operators/service.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { validation } from "./support.ts";

// Text from many countries (s33 unicode audit, findings 1 to 3): domains have one ASCII form,
// names and tags one Unicode normalization form, and account names fold case fully.

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const NFC = (text: string) => text.normalize("NFC");
const NFD = (text: string) => text.normalize("NFD");
/** idsFoundBy lists, for each value of a filter in turn, the ids of the list it answers. */
async function idsFoundBy(list: "contacts" | "accounts", filter: string, values: string[]): Promise<string[][]> {
  const found: string[][] = [];
  for (const value of values) found.push((await h.json("GET", `/public/v1/${list}?${filter}=${encodeURIComponent(value)}`)).body.data?.map((row: { id: string }) => row.id));
  return found;
}

const LOCAL_PART = "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null; a local part must be ASCII (internationalized local parts, RFC 6531, are not accepted)";

describe("international domains: stored in their ASCII form, found by either spelling", () => {
  test("a contact's email with a Unicode domain is stored with its A-label domain; the email filter and a batch match take either spelling", async () => {
    const made = await h.json("POST", "/public/v1/contacts", { body: { email: "Info@Müller.de" } });
    expect([made.status, made.body.data?.email]).toEqual([201, "info@xn--mller-kva.de"]);
    const chinese = await h.json("POST", "/public/v1/contacts", { body: { email: "sales@例子.广告" } });
    expect([chinese.status, chinese.body.data?.email]).toEqual([201, "sales@xn--fsqu00a.xn--4rr70v"]);
    expect(await idsFoundBy("contacts", "email", ["info@müller.de", "INFO@MÜLLER.DE", "info@xn--mller-kva.de"])).toEqual([[made.body.data.id], [made.body.data.id], [made.body.data.id]]);
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: [{ email: "info@müller.de", first_name: "Jörg" }] } });
    expect(batch.body.data).toEqual([{ status: "updated", id: made.body.data.id }]);
  });

  test("a non-ASCII local part is refused, saying why; a domain IDNA cannot convert keeps today's words", async () => {
    expect((await h.json("POST", "/public/v1/contacts", { body: { email: "jörg@example.com" } })).body).toEqual(validation([{ pointer: "/email", detail: LOCAL_PART }]));
    expect((await h.json("POST", "/public/v1/contacts", { body: { email: "info@mü ller.de" } })).body).toEqual(
      validation([{ pointer: "/email", detail: "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null" }]),
    );
    // The path of a URL is no part of a domain, though IDNA would drop it silently.
    expect((await h.json("POST", "/public/v1/contacts", { body: { email: "info@müller.de/x" } })).body).toEqual(
      validation([{ pointer: "/email", detail: "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null" }]),
    );
    const filter = await h.json("GET", `/public/v1/contacts?email=${encodeURIComponent("jörg@example.com")}`);
    expect(filter.body).toEqual(validation([{ parameter: "email", detail: "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de); a local part must be ASCII (internationalized local parts, RFC 6531, are not accepted)" }]));
  });

  test("users and operators: a Unicode domain is stored in its ASCII form and is the same address as it; a non-ASCII local part is refused, saying why", async () => {
    const user = await h.json("POST", "/public/v1/users", { body: { name: "Jörg", email: "jorg@müller.de" } });
    expect([user.status, user.body.data?.email]).toEqual([201, "jorg@xn--mller-kva.de"]);
    expect((await h.json("POST", "/public/v1/users", { body: { name: "Again", email: "JORG@xn--mller-kva.de" } })).status).toBe(409);
    expect((await h.json("POST", "/public/v1/users", { body: { name: "Jörg", email: "jörg@example.com" } })).body).toEqual(
      validation([{ pointer: "/email", detail: "must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de); a local part must be ASCII (internationalized local parts, RFC 6531, are not accepted)" }]),
    );
    expect(await createOperator(h.rt.db, { email: "ops@müller.de", password: "correct horse battery" })).toEqual({ id: expect.any(String), email: "ops@xn--mller-kva.de" });
    await expect(createOperator(h.rt.db, { email: "jörg@example.com", password: "correct horse battery" })).rejects.toThrow("a local part must be ASCII");
  });

  test("an account's domain in Unicode is stored in its A-label form; the filter and a batch match take either spelling; what IDNA cannot convert is refused", async () => {
    const made = await h.json("POST", "/public/v1/accounts", { body: { name: "Müller", domain: "Müller.de" } });
    expect([made.status, made.body.data?.domain]).toEqual([201, "xn--mller-kva.de"]);
    expect(await idsFoundBy("accounts", "domain", ["müller.de", "MÜLLER.DE", "xn--mller-kva.de"])).toEqual([[made.body.data.id], [made.body.data.id], [made.body.data.id]]);
    const batch = await h.json("POST", "/public/v1/accounts/batch", { body: { items: [{ name: "Müller GmbH", domain: "müller.de" }] } });
    expect(batch.body.data).toEqual([{ status: "updated", id: made.body.data.id }]);
    const refused = validation([{ pointer: "/domain", detail: "must be a domain name like example.com of at most 253 characters, counted in ASCII form (müller.de as xn--mller-kva.de), or null" }]);
    expect((await h.json("POST", "/public/v1/accounts", { body: { name: "Bad", domain: "mü ller.de" } })).body).toEqual(refused);
    expect((await h.json("POST", "/public/v1/accounts", { body: { name: "Bad", domain: "müller.de/kontakt" } })).body).toEqual(refused);
    expect((await h.json("GET", `/public/v1/accounts?domain=${encodeURIComponent("mü ller.de")}`)).body).toEqual(
      validation([{ parameter: "domain", detail: "must be a domain name like example.com" }]),
    );
  });
});

describe("contact names and tags: stored NFC, searched NFC", () => {
  test("names given in NFD are stored NFC and found by the name as typed, in either form", async () => {
    const made = await h.json("POST", "/public/v1/contacts", { body: { first_name: NFD("김민준"), last_name: NFD("José") } });
    expect([made.status, made.body.data?.first_name, made.body.data?.last_name, made.body.data?.full_name]).toEqual([201, NFC("김민준"), NFC("José"), NFC("김민준 José")]);
    for (const needle of ["김민준", "김민", "José", "Jos"]) {
      for (const form of [NFC(needle), NFD(needle)]) {
        const found = await h.json("GET", `/public/v1/contacts?full_name=${encodeURIComponent(form)}`);
        expect([form, found.body.meta?.total]).toEqual([form, 1]);
      }
    }
    const patched = await h.json("PATCH", `/public/v1/contacts/${made.body.data.id}`, { body: { last_name: NFD("Müller") } });
    expect(patched.body.data.last_name).toBe(NFC("Müller"));
  });

  test("tags are stored NFC: one tag in both forms is a repeat, an NFD filter, addition or removal is the NFC tag", async () => {
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "T", tags: [NFC("café"), NFD("café")] } })).body).toEqual(
      validation([{ pointer: "/tags/1", detail: "repeats item 0" }]),
    );
    const made = await h.json("POST", "/public/v1/contacts", { body: { first_name: "T", tags: [NFD("café")] } });
    expect(made.body.data.tags).toEqual([NFC("café")]);
    for (const form of [NFC("café"), NFD("café")]) expect((await h.json("GET", `/public/v1/contacts?tag=${encodeURIComponent(form)}`)).body.meta.total).toBe(1);
    const added = await h.json("POST", `/public/v1/contacts/${made.body.data.id}/tags`, { body: { tag: NFC("café") } });
    expect(added.body.data.tags).toEqual([NFC("café")]);
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: [{ first_name: "B", tags: [NFD("Zürich"), NFC("Zürich")] }] } });
    expect(batch.body.data).toEqual([{ status: "invalid", errors: [{ pointer: "/items/0/tags/1", detail: "repeats item 0" }] }]);
    const removed = await h.json("DELETE", `/public/v1/contacts/${made.body.data.id}/tags/${encodeURIComponent(NFD("café"))}`);
    expect(removed.body.data.tags).toEqual([]);
  });
});

describe("account names: case folded in full", () => {
  test("GROSSHANDEL SÜD GMBH finds Großhandel Süd GmbH, and a batch upsert of it updates that account", async () => {
    const made = (await h.json("POST", "/public/v1/accounts", { body: { name: "Großhandel Süd GmbH" } })).body.data;
    expect(await idsFoundBy("accounts", "name", ["GROSSHANDEL SÜD GMBH", "grosshandel süd gmbh", NFD("Großhandel Süd GmbH")])).toEqual([[made.id], [made.id], [made.id]]);
    const batch = await h.json("POST", "/public/v1/accounts/batch", { body: { items: [{ name: "GROSSHANDEL SÜD GMBH", industry: "wholesale" }] } });
    expect(batch.body.data).toEqual([{ status: "updated", id: made.id }]);
  });

  test("the capital sharp s (GROẞHANDEL), Greek capitals with dialytika and tonos, and dotted and dotless Turkish i find their account, and a batch upsert of them updates it", async () => {
    const names = ["Großhandel Süd GmbH", "Ευρωπαΐκή Τράπεζα", "İstanbul Gıda", "ﬀ Ltd", "Οδός Α.Ε."];
    const made: string[] = [];
    for (const name of names) made.push((await h.json("POST", "/public/v1/accounts", { body: { name } })).body.data.id);
    const spellings = [
      ["GROẞHANDEL SÜD GMBH", "grossHANDEL süd gmbh"],
      ["ΕΥΡΩΠΑΪ́ΚΉ ΤΡΆΠΕΖΑ", NFD("ευρωπαΐκή τράπεζα")],
      ["ISTANBUL GIDA", "İSTANBUL GIDA", "istanbul gida", "ıstanbul gıda"],
      ["FF LTD", "ﬀ ltd"],
      ["ΟΔΌΣ Α.Ε.", "οδόσ α.ε."],
    ];
    for (const [i, values] of spellings.entries()) expect([values, await idsFoundBy("accounts", "name", values)]).toEqual([values, values.map(() => [made[i]!])]);
    const batch = await h.json("POST", "/public/v1/accounts/batch", { body: { items: spellings.map((values) => ({ name: values[0], industry: "x" })) } });
    expect(batch.body.data).toEqual(made.map((id) => ({ status: "updated", id })));
    expect((await h.json("GET", "/public/v1/accounts")).body.meta.total).toBe(names.length);
  });
});

describe("contact names and tags: their length limits hold in NFC, the form they are stored in", () => {
  // U+0958 DEVANAGARI LETTER QA is a composition exclusion: NFC writes it U+0915 U+093C, two UTF-16 units.
  const QA = "\u0958";
  const NAME = "must be a string of at most 200 characters, or null";
  const TAG = 'must be a tag of 1 to 100 characters, not "." or ".."';

  test("a name or a tag longer than its limit once in NFC is 422 naming it on create, PATCH and tagging, as a longer one given is; at the limit it is stored", async () => {
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: QA.repeat(200) } })).body).toEqual(validation([{ pointer: "/first_name", detail: NAME }]));
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "T", tags: ["vip", QA.repeat(51)] } })).body).toEqual(validation([{ pointer: "/tags/1", detail: TAG }]));
    const made = await h.json("POST", "/public/v1/contacts", { body: { first_name: QA.repeat(100), tags: [QA.repeat(50)] } });
    expect([made.status, made.body.data.first_name.length, made.body.data.tags[0].length]).toEqual([201, 200, 100]);
    const id = made.body.data.id;
    expect((await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { last_name: `${QA.repeat(100)}x` } })).body).toEqual(validation([{ pointer: "/last_name", detail: NAME }]));
    expect((await h.json("POST", `/public/v1/contacts/${id}/tags`, { body: { tag: QA.repeat(51) } })).body).toEqual(validation([{ pointer: "/tag", detail: TAG }]));
    // What was stored is what the API's own schema allows, so a client can send it back.
    const stored = await h.json("GET", `/public/v1/contacts/${id}`);
    const { first_name, tags } = stored.body.data;
    expect((await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name, tags } })).status).toBe(200);
  });

  test("decomposed text (NFD) whose NFC form is within the limit is stored, on create, PATCH, batch and tagging; over the limit in NFC it is refused", async () => {
    const e = "e\u0301"; // é decomposed: two characters given, one stored
    const jamo = NFD("한".repeat(70)); // 210 conjoining jamo given, 70 syllables stored
    const made = await h.json("POST", "/public/v1/contacts", { body: { first_name: e.repeat(150), last_name: jamo, tags: [e.repeat(60)] } });
    expect([made.status, made.body.data?.first_name, made.body.data?.last_name, made.body.data?.tags]).toEqual([201, "é".repeat(150), "한".repeat(70), ["é".repeat(60)]]);
    const id = made.body.data.id;
    const patched = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { first_name: e.repeat(200), last_name: QA.repeat(100) } });
    expect([patched.status, patched.body.data?.first_name, patched.body.data?.last_name]).toEqual([200, "é".repeat(200), NFC(QA.repeat(100))]);
    const tagged = await h.json("POST", `/public/v1/contacts/${id}/tags`, { body: { tag: e.repeat(100) } });
    expect([tagged.status, tagged.body.data?.tags]).toEqual([200, ["é".repeat(60), "é".repeat(100)]]);
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: [{ first_name: e.repeat(200), tags: [e.repeat(100)] }, { first_name: e.repeat(201) }, { first_name: "B", tags: [e.repeat(101)] }] } });
    expect(batch.body.data.map((item: { status: string; errors?: unknown }) => [item.status, item.errors ?? null])).toEqual([
      ["created", null],
      ["invalid", [{ pointer: "/items/1/first_name", detail: NAME }]],
      ["invalid", [{ pointer: "/items/2/tags/0", detail: TAG }]],
    ]);
    expect((await h.json("GET", `/public/v1/contacts/${batch.body.data[0].id}`)).body.data.tags).toEqual(["é".repeat(100)]);
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: e.repeat(201) } })).body).toEqual(validation([{ pointer: "/first_name", detail: NAME }]));
    expect((await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { tags: [e.repeat(101)] } })).body).toEqual(validation([{ pointer: "/tags/0", detail: TAG }]));
    expect((await h.json("POST", `/public/v1/contacts/${id}/tags`, { body: { tag: e.repeat(101) } })).body).toEqual(validation([{ pointer: "/tag", detail: TAG }]));
  });

  test("a batch refuses such an item as invalid, naming the field", async () => {
    const batch = await h.json("POST", "/public/v1/contacts/batch", { body: { items: [{ first_name: QA.repeat(101) }, { first_name: "B", tags: [QA.repeat(51)] }, { first_name: QA.repeat(100) }] } });
    expect(batch.body.data.map((item: { status: string; errors?: unknown }) => [item.status, item.errors ?? null])).toEqual([
      ["invalid", [{ pointer: "/items/0/first_name", detail: NAME }]],
      ["invalid", [{ pointer: "/items/1/tags/0", detail: TAG }]],
      ["created", null],
    ]);
  });
});
