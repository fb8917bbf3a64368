import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createApiToken } from "../../server/auth/service.ts";
import { parseCsv } from "../../server/import/csv.ts";
import { SHUT_OUT, underUmask } from "../support/permissions.ts";
import { importServer, runImport, startImport, summaryLine, writeContactsCsv } from "./support.ts";

let server: Awaited<ReturnType<typeof importServer>>;
beforeEach(async () => {
  server = await importServer();
});
afterEach(() => server.stop());

const apiArgs = () => ["--url", server.url, "--token-file", server.tokenFile];
/** importText imports a file of this text into the test server, with further arguments. */
const importText = (name: string, text: string, ...args: string[]) => {
  writeFileSync(join(server.dir, name), text);
  return runImport([join(server.dir, name), ...apiArgs(), ...args]);
};
/** contactAccounts lists each imported contact's email with the name and domain of its account. */
const contactAccounts = () => server.db.all<{ email: string; name: string; domain: string | null }>("SELECT c.email, a.name, a.domain FROM contacts c JOIN contact_accounts ca ON ca.contact_id = c.id JOIN accounts a ON a.id = ca.account_id ORDER BY c.email");
/** api sends a request to the test server's API with the importer's token and answers its status and body. */
const api = async (method: string, path: string, body?: unknown) => {
  const token = readFileSync(server.tokenFile, "utf8").trim();
  const res = await fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, body: res.status === 204 ? null : ((await res.json()) as any) };
};
/** apiCreate creates a record through the test server's API with the importer's token and answers it. */
const apiCreate = async (path: string, body: unknown) => {
  const res = await api("POST", path, body);
  expect(res.status).toBe(201);
  return res.body.data as { id: string };
};
/** replayNotes are the importer's stderr lines saying rows were answered from an earlier run. */
const replayNotes = (stderr: string) => stderr.split("\n").filter((line) => line.includes("from an earlier run"));

describe("crm import contacts: happy paths", () => {
  test("5,000 generated rows: the counts add up, no email twice, and the invalid-rows file lists exactly the bad rows with their errors", async () => {
    const csv = writeContactsCsv(server.dir);
    const res = await runImport([csv.path, ...apiArgs()]);
    const invalidFile = join(server.dir, "contacts.invalid.csv");
    expect(res.stdout).toBe(`${summaryLine("imported", csv.rows, csv.expected)}invalid rows with their errors: ${invalidFile}\n`);
    expect(res.code).toBe(1);
    expect(res.stderr).toStartWith("columns: ID -> external_id, Email -> email, First Name -> first_name, Last Name -> last_name, Phone -> phone, Company -> account.name, Website -> account.domain, Tags -> tags; ignored: Notes\n");
    expect(csv.expected.created + csv.expected.updated + csv.expected.unchanged + csv.expected.invalid).toBe(csv.rows);
    expect(await server.count()).toBe(csv.expected.created);
    expect((await server.db.all("SELECT email FROM contacts GROUP BY email HAVING count(*) > 1"))).toEqual([]);
    // every account once: the Acme ones by domain, the name-only ones by name
    expect(await server.count("accounts")).toBe(40 + 13);

    const [header, ...invalid] = parseCsv(readFileSync(invalidFile, "utf8"));
    // customer data: the owner's only, whatever the umask
    expect(statSync(invalidFile).mode & 0o777).toBe(0o600);
    expect(header).toEqual([...csv.header, "import_row", "import_errors"]);
    expect(invalid.map((r) => Number(r[csv.header.length]))).toEqual(csv.badRows);
    for (const record of invalid) expect(record.slice(0, csv.header.length)).toEqual(csv.records[Number(record[csv.header.length]) - 1]!);
    const errorsOf = (row: number) => invalid.find((r) => Number(r[csv.header.length]) === row)![csv.header.length + 1];
    expect(errorsOf(50)).toBe("Email: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null");
    expect(errorsOf(997)).toBe("First Name: must be a string of at most 200 characters, or null");
    // A website naming no host is no website: the row is imported, its company found by name, and the rows are named.
    const notDomains = csv.records.flatMap((record, i) => (record[6] === "https://bad domain!" ? [`row ${i + 1} "https://bad domain!"`] : []));
    expect(notDomains.length).toBeGreaterThanOrEqual(2);
    expect(res.stderr).toEndWith(`Website: ${notDomains.length} values are not a domain name, each read as no website (its company found by name): ${notDomains.join(", ")}\n`);
    expect(await server.db.all("SELECT DISTINCT a.name, a.domain FROM contacts c JOIN contact_accounts ca ON ca.contact_id = c.id JOIN accounts a ON a.id = ca.account_id WHERE c.email = 'person1499@example.com'")).toEqual([{ name: "Acme 19", domain: "acme19.example" }]);

    const sample = async (email: string) => (await server.db.all("SELECT first_name, last_name, phone, external_id, properties FROM contacts WHERE email = ?", [email]));
    expect(await sample("person1@example.com")).toEqual([{ first_name: "José", last_name: "Müller Jr", phone: "+44 20 7946 0001", external_id: null, properties: "{}" }]);
    expect(await sample("person20@example.com")).toEqual([{ first_name: "Mårten", last_name: "Ñúñez", phone: null, external_id: "src-20", properties: JSON.stringify({ tags: ["vip", "imported"] }) }]);
  }, 60_000);

  test("--trial creates one contact (and its account) and stops; --dry-run creates none and reports the bad rows", async () => {
    const csv = writeContactsCsv(server.dir, 300);
    const dry = await runImport([csv.path, "--dry-run", "--invalid-file", join(server.dir, "dry.csv")]);
    const badLocally = csv.badRows.length;
    expect(dry.stdout).toBe(`dry run, nothing sent: 300 rows: valid ${300 - badLocally}, invalid ${badLocally}\ninvalid rows with their errors: ${join(server.dir, "dry.csv")}\n`);
    expect(dry.code).toBe(1);
    expect(parseCsv(readFileSync(join(server.dir, "dry.csv"), "utf8")).slice(1).map((r) => Number(r[csv.header.length]))).toEqual(csv.badRows);
    expect([await server.count(), await server.count("accounts"), await server.count("events")]).toEqual([0, 0, 0]);

    const trial = await runImport([csv.path, "--trial", ...apiArgs()]);
    expect(trial).toMatchObject({ code: 0, stdout: summaryLine("trial, one row sent", 1, { created: 1, updated: 0, unchanged: 0, invalid: 0 }) });
    expect((await server.db.all("SELECT email, first_name FROM contacts"))).toEqual([{ email: "person1@example.com", first_name: "José" }]);
    expect(await server.count("accounts")).toBe(1);
  }, 60_000);

  test("a file of several megabytes, read a megabyte at a time: rows and characters cut by a piece's end read whole, a bad byte far in names its line", async () => {
    const csv = writeContactsCsv(server.dir, 30_000);
    expect(readFileSync(csv.path).byteLength).toBeGreaterThan(2 * 1024 * 1024);
    const dry = await runImport([csv.path, "--dry-run", "--invalid-file", join(server.dir, "dry.csv")]);
    expect(dry.stdout).toBe(`dry run, nothing sent: 30000 rows: valid ${30_000 - csv.badRows.length}, invalid ${csv.badRows.length}\ninvalid rows with their errors: ${join(server.dir, "dry.csv")}\n`);
    const invalid = parseCsv(readFileSync(join(server.dir, "dry.csv"), "utf8")).slice(1);
    expect(invalid.map((r) => Number(r[csv.header.length]))).toEqual(csv.badRows);
    for (const record of invalid) expect(record.slice(0, csv.header.length)).toEqual(csv.records[Number(record[csv.header.length]) - 1]!);
    // Some cells span lines: the line named is the file's, as an editor counts them.
    const lastLine = readFileSync(csv.path, "utf8").split("\n").length;
    writeFileSync(csv.path, Buffer.concat([readFileSync(csv.path), Buffer.from("late@example.com,Jos"), Buffer.from([0xe9]), Buffer.from("\n")]));
    expect(await runImport([csv.path, "--dry-run"])).toEqual({ code: 2, stdout: "", stderr: `crm: ${csv.path}: line ${lastLine} is not UTF-8; save the file as UTF-8 (in Excel: "CSV UTF-8") and run the import again\n` });
  }, 60_000);

  test("JSON Lines with --map: nested objects become columns, custom fields and tags are kept as given", async () => {
    const file = join(server.dir, "people.jsonl");
    const lines = [
      { mail: "ada@example.com", name: { first: "Ada", last: "Lovelace" }, org: { name: "Analytical Engines", site: "engines.example" }, plan: "pro", tags: ["vip", "math"] },
      { mail: "grace@example.com", name: { first: "Grace" }, plan: null },
    ];
    writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n"));
    const res = await runImport([file, ...apiArgs(), "--map", "mail=email,name.first=first_name,name.last=last_name,org.name=account.name,org.site=account.domain,plan=custom_fields.plan"]);
    expect(res).toMatchObject({ code: 0, stdout: "imported: 2 rows: created 2, updated 0, unchanged 0, invalid 0\n" });
    const ada = (await server.db.get<{ properties: string; account: string }>("SELECT c.properties, a.domain AS account FROM contacts c JOIN contact_accounts ca ON ca.contact_id = c.id JOIN accounts a ON a.id = ca.account_id WHERE c.email = 'ada@example.com'"))!;
    expect({ ...ada, properties: JSON.parse(ada.properties) }).toEqual({ account: "engines.example", properties: { tags: ["vip", "math"], custom_fields: { plan: "pro" } } });
  }, 60_000);

  test("rows too large for 100 to a request body go in smaller batches", async () => {
    const file = join(server.dir, "large.jsonl");
    const blob = "x".repeat(15_000);
    writeFileSync(file, Array.from({ length: 150 }, (_, i) => JSON.stringify({ email: `big${i}@example.com`, custom_fields: { blob } })).join("\n"));
    const res = await runImport([file, ...apiArgs()]);
    expect(res).toMatchObject({ code: 0, stdout: "imported: 150 rows: created 150, updated 0, unchanged 0, invalid 0\n" });
    expect(await server.count()).toBe(150);
  }, 60_000);
});

describe("crm import contacts: other CRMs' exports", () => {
  test("a Pipedrive people export (Person - and Organization - prefixes, a - Work qualifier) and HubSpot's Website URL map their columns", async () => {
    const pipedrive = await importText("pipedrive.csv", '"Person - ID","Person - Name","Person - First name","Person - Last name","Person - Email - Work","Person - Email - Home","Person - Phone - Work","Person - Organization","Organization - Website"\n"17","Jana Nováková","Jana","Nováková","jana@firma.cz","jana@doma.cz","+420 601 123 456","Firma s.r.o.","https://www.firma.cz/"\n');
    expect([pipedrive.code, pipedrive.stderr.split("\n")[0]]).toEqual([0, "columns: Person - ID -> external_id, Person - First name -> first_name, Person - Last name -> last_name, Person - Email - Work -> email, Person - Phone - Work -> phone, Person - Organization -> account.name, Organization - Website -> account.domain; ignored: Person - Name, Person - Email - Home"]);
    const hubspot = await importText("hubspot.csv", "Record ID,Email,Company Name,Website URL\n901,pat@acme.example,Acme,acme.example\n");
    expect([hubspot.code, hubspot.stderr.split("\n")[0]]).toEqual([0, "columns: Record ID -> external_id, Email -> email, Company Name -> account.name, Website URL -> account.domain"]);
    expect(await server.db.all("SELECT c.external_id, c.email, c.first_name, c.last_name, c.phone, a.name, a.domain FROM contacts c JOIN contact_accounts ca ON ca.contact_id = c.id JOIN accounts a ON a.id = ca.account_id ORDER BY c.email")).toEqual([
      { external_id: "17", email: "jana@firma.cz", first_name: "Jana", last_name: "Nováková", phone: "+420 601 123 456", name: "Firma s.r.o.", domain: "www.firma.cz" },
      { external_id: "901", email: "pat@acme.example", first_name: null, last_name: null, phone: null, name: "Acme", domain: "acme.example" },
    ]);
  }, 60_000);
});

describe("crm import contacts: rows neither lost nor merged", () => {
  test("an account's columns (Account ID, Account Phone) never feed the contact's fields: three contacts stay three", async () => {
    const file = join(server.dir, "accounts-columns.csv");
    writeFileSync(file, "Email,First Name,Account ID,Account Name,Account Phone,Phone\nk1@example.com,K1,001A,Acme,+1 800 2263,+44 7700 900001\nk2@example.com,K2,001A,Acme,+1 800 2263,\nk3@example.com,K3,001A,Acme,+1 800 2263,\n");
    const res = await runImport([file, ...apiArgs()]);
    expect([res.code, res.stdout, res.stderr.split("\n")[0]]).toEqual([0, "imported: 3 rows: created 3, updated 0, unchanged 0, invalid 0\n", "columns: Email -> email, First Name -> first_name, Account Name -> account.name, Phone -> phone; ignored: Account ID, Account Phone"]);
    expect(await server.db.all("SELECT email, external_id, phone FROM contacts ORDER BY email")).toEqual([
      { email: "k1@example.com", external_id: null, phone: "+44 7700 900001" },
      { email: "k2@example.com", external_id: null, phone: null },
      { email: "k3@example.com", external_id: null, phone: null },
    ]);
  }, 60_000);

  test("a matched contact keeps the custom fields a row leaves empty and those the file has no column for", async () => {
    const first = join(server.dir, "cf-all.csv");
    writeFileSync(first, "Email,First Name,custom_fields.plan,custom_fields.tier,custom_fields.note\ncf@example.com,C,gold,t1,keep\n");
    expect((await runImport([first, ...apiArgs()])).code).toBe(0);
    const file = join(server.dir, "cf.csv");
    writeFileSync(file, "Email,custom_fields.plan,custom_fields.tier\ncf@example.com,silver,\n");
    const res = await runImport([file, ...apiArgs()]);
    expect([res.code, res.stdout]).toEqual([0, "imported: 1 rows: created 0, updated 1, unchanged 0, invalid 0\n"]);
    const stored = (await server.db.get<{ properties: string }>("SELECT properties FROM contacts WHERE email = 'cf@example.com'"))!;
    expect(JSON.parse(stored.properties)).toEqual({ custom_fields: { plan: "silver", tier: "t1", note: "keep" } });
    const events = await server.db.all<{ type: string; payload: string }>("SELECT type, payload FROM events ORDER BY id");
    expect(events.map((e) => [e.type, JSON.parse(e.payload).data.custom_fields])).toEqual([
      ["contact.created", { plan: "gold", tier: "t1", note: "keep" }],
      ["contact.updated", { plan: "silver", tier: "t1", note: "keep" }],
    ]);
  }, 60_000);

  test("a person who came by a form and a company known by name are a row's contact and account when it brings an external id and a website: updated and given them, not made twice", async () => {
    const form = await apiCreate("/public/v1/contacts", { first_name: "Ada", last_name: "Form", email: "form.person@example.org" });
    const initech = await apiCreate("/public/v1/accounts", { name: "Initech 2176" });
    const res = await importText("first.csv", "External ID,Email,First name,Last name,Company,Website\nsrc-15161,Form.Person@example.org,Ada,Import,Initech 2176,https://www.initech.example/\n");
    expect([res.code, res.stdout]).toEqual([0, "imported: 1 rows: created 0, updated 1, unchanged 0, invalid 0\n"]);
    expect(await server.db.all("SELECT id, external_id, last_name FROM contacts")).toEqual([{ id: form.id, external_id: "src-15161", last_name: "Import" }]);
    expect(await server.db.all("SELECT id, name, domain FROM accounts")).toEqual([{ id: initech.id, name: "Initech 2176", domain: "www.initech.example" }]);
    expect(await contactAccounts()).toEqual([{ email: "form.person@example.org", name: "Initech 2176", domain: "www.initech.example" }]);
    // The form's own upsert by email and a row giving only the company's name still find them.
    const later = await importText("later.csv", "Email,Phone,Company\nform.person@example.org,+1 555 0100,Initech 2176\n");
    expect([later.code, later.stdout]).toEqual([0, "imported: 1 rows: created 0, updated 1, unchanged 0, invalid 0\n"]);
    const events = await server.db.all<{ type: string }>("SELECT type FROM events ORDER BY id");
    expect(events.map((e) => e.type)).toEqual(["contact.created", "account.created", "account.updated", "contact.updated", "contact.updated"]);
  }, 60_000);

  test("a row whose external id matches nothing beside contacts of its email with other ids, or whose website matches nothing beside a company of its name with another, is a new contact and account", async () => {
    const held = await apiCreate("/public/v1/contacts", { email: "held@example.com", external_id: "src-1" });
    const globex = await apiCreate("/public/v1/accounts", { name: "Globex", domain: "globex.test" });
    const res = await importText("clash.csv", "ID,Email,Company,Website\nsrc-2,held@example.com,Globex,globex.de\n");
    expect([res.code, res.stdout]).toEqual([0, "imported: 1 rows: created 1, updated 0, unchanged 0, invalid 0\n"]);
    expect(await server.db.all("SELECT id, external_id FROM contacts WHERE external_id = ?", ["src-1"])).toEqual([{ id: held.id, external_id: "src-1" }]);
    expect(await contactAccounts()).toEqual([{ email: "held@example.com", name: "Globex", domain: "globex.de" }]);
    expect(await server.db.all("SELECT id, domain FROM accounts WHERE id = ?", [globex.id])).toEqual([{ id: globex.id, domain: "globex.test" }]);
  }, 60_000);

  test("a row whose external id matches nothing and whose email several contacts without one share is invalid, naming them", async () => {
    const one = await apiCreate("/public/v1/contacts", { first_name: "One", email: "twin@example.com" });
    const two = await apiCreate("/public/v1/contacts", { first_name: "Two", email: "twin@example.com" });
    const invalidFile = join(server.dir, "twin.invalid.csv");
    const res = await importText("twin.csv", "ID,Email\nsrc-3,twin@example.com\n", "--invalid-file", invalidFile);
    expect([res.code, res.stdout]).toEqual([1, `imported: 1 rows: created 0, updated 0, unchanged 0, invalid 1\ninvalid rows with their errors: ${invalidFile}\n`]);
    expect(parseCsv(readFileSync(invalidFile, "utf8")).slice(1).map((r) => [r[2], r[3]])).toEqual([
      ["1", `ID: no contact has this external_id, and several of this email have none (${one.id}, ${two.id}): give it to the one it belongs to (PATCH /public/v1/contacts/ID), or create this contact with POST /public/v1/contacts first`],
    ]);
    expect(await server.count()).toBe(2);
  }, 60_000);

  test("a placeholder website (N/A, none, -) is no domain: each company keeps its own account", async () => {
    const res = await importText("no-website.csv", "Email,Company,Website\nna1@example.com,Acme,N/A\nna2@example.com,Beta Ltd,n/a\nna3@example.com,Gamma,none\nna4@example.com,Delta,-\nna5@example.com,Epsilon,epsilon.example\n");
    expect([res.code, res.stdout]).toEqual([0, "imported: 5 rows: created 5, updated 0, unchanged 0, invalid 0\n"]);
    expect(await contactAccounts()).toEqual([
      { email: "na1@example.com", name: "Acme", domain: null },
      { email: "na2@example.com", name: "Beta Ltd", domain: null },
      { email: "na3@example.com", name: "Gamma", domain: null },
      { email: "na4@example.com", name: "Delta", domain: null },
      { email: "na5@example.com", name: "Epsilon", domain: "epsilon.example" },
    ]);
  }, 60_000);

  test("a website that is no host name (dots, a space, one label) is no domain, said on stderr by row; its company keeps its own account; a trailing dot or a port is dropped", async () => {
    const csv = "Email,Company,Website\nanna@alpha.example,Alpha GmbH,...\nbert@beta.example,Beta AG,...\ncora@gamma.example,Gamma,.\ndora@delta.example,Delta,a..b\nemil@epsilon.example,Epsilon,https://bad domain!\nfred@zeta.example,Zeta,kein\ngina@eta.example,Eta,https://eta.example.:8443/x\nhans@eta.example,Eta,eta.example\n";
    const note = 'Website: 6 values are not a domain name, each read as no website (its company found by name): row 1 "...", row 2 "...", row 3 ".", row 4 "a..b", row 5 "https://bad domain!", row 6 "kein"\n';
    const file = join(server.dir, "dots.csv");
    writeFileSync(file, csv);
    const dry = await runImport([file, "--dry-run"]);
    expect([dry.code, dry.stdout]).toEqual([0, "dry run, nothing sent: 8 rows: valid 8, invalid 0\n"]);
    expect(dry.stderr).toEndWith(note);
    const res = await runImport([file, ...apiArgs()]);
    expect([res.code, res.stdout]).toEqual([0, "imported: 8 rows: created 8, updated 0, unchanged 0, invalid 0\n"]);
    expect(res.stderr).toEndWith(note);
    expect(await contactAccounts()).toEqual([
      { email: "anna@alpha.example", name: "Alpha GmbH", domain: null },
      { email: "bert@beta.example", name: "Beta AG", domain: null },
      { email: "cora@gamma.example", name: "Gamma", domain: null },
      { email: "dora@delta.example", name: "Delta", domain: null },
      { email: "emil@epsilon.example", name: "Epsilon", domain: null },
      { email: "fred@zeta.example", name: "Zeta", domain: null },
      { email: "gina@eta.example", name: "Eta", domain: "eta.example" },
      { email: "hans@eta.example", name: "Eta", domain: "eta.example" },
    ]);
    expect(await server.count("accounts")).toBe(7);
  }, 60_000);

  test("more than ten websites that are no host name: the first ten are named, and how many more", async () => {
    const rows = Array.from({ length: 12 }, (_, i) => `p${i}@example.com,Co ${i},-.${i}`).join("\n");
    const res = await importText("many.csv", `Email,Company,Web site\n${rows}\n`);
    expect([res.code, res.stdout]).toEqual([0, "imported: 12 rows: created 12, updated 0, unchanged 0, invalid 0\n"]);
    const named = Array.from({ length: 10 }, (_, i) => `row ${i + 1} "-.${i}"`).join(", ");
    expect(res.stderr).toEndWith(`Web site: 12 values are not a domain name, each read as no website (its company found by name): ${named}, and 2 more\n`);
  }, 60_000);

  test("a website or an email with an international domain (www.müller.de) is imported in its ASCII form, one account for either spelling; a non-ASCII local part is an invalid row saying why", async () => {
    const res = await importText(
      "intl.csv",
      "Email,First name,Company,Website\njorg@example.com,Jörg,Müller GmbH,https://www.müller.de/kontakt\ninfo@müller.de,Info,Müller GmbH,https://www.xn--mller-kva.de\njörg@example.com,Jörg,Müller GmbH,www.müller.de\n",
      "--invalid-file",
      join(server.dir, "intl.invalid.csv"),
    );
    expect([res.code, res.stdout]).toEqual([1, `imported: 3 rows: created 2, updated 0, unchanged 0, invalid 1\ninvalid rows with their errors: ${join(server.dir, "intl.invalid.csv")}\n`]);
    expect(await contactAccounts()).toEqual([
      { email: "info@xn--mller-kva.de", name: "Müller GmbH", domain: "www.xn--mller-kva.de" },
      { email: "jorg@example.com", name: "Müller GmbH", domain: "www.xn--mller-kva.de" },
    ]);
    expect(parseCsv(readFileSync(join(server.dir, "intl.invalid.csv"), "utf8")).slice(1)).toEqual([
      ["jörg@example.com", "Jörg", "Müller GmbH", "www.müller.de", "3", "Email: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null; a local part must be ASCII (internationalized local parts, RFC 6531, are not accepted)"],
    ]);
  }, 60_000);

  test("a name or a tag longer than its limit once in NFC (U+0958 is two characters there) is an invalid row naming its column; every other row is imported", async () => {
    const qa = (n: number) => "\u0958".repeat(n);
    const res = await importText("nfc.csv", `Email,First name,Tags\na@example.com,${qa(200)},\nb@example.com,B,${qa(51)}\nc@example.com,${qa(100)},${qa(50)}\n`, "--invalid-file", join(server.dir, "nfc.invalid.csv"));
    expect([res.code, res.stdout]).toEqual([1, `imported: 3 rows: created 1, updated 0, unchanged 0, invalid 2\ninvalid rows with their errors: ${join(server.dir, "nfc.invalid.csv")}\n`]);
    expect(parseCsv(readFileSync(join(server.dir, "nfc.invalid.csv"), "utf8")).slice(1).map((r) => [r[3], r[4]])).toEqual([
      ["1", "First name: must be a string of at most 200 characters, or null"],
      ["2", 'Tags: must be a tag of 1 to 100 characters, not "." or ".."'],
    ]);
  }, 60_000);

  test("a name or a tag given decomposed (NFD) whose NFC form is within its limit is imported, stored NFC", async () => {
    const e = (n: number) => "e\u0301".repeat(n);
    const res = await importText("nfd.csv", `Email,First name,Last name,Tags\nnfd@example.com,${e(150)},${"한".repeat(70).normalize("NFD")},${e(60)}\n`);
    expect([res.code, res.stdout]).toEqual([0, "imported: 1 rows: created 1, updated 0, unchanged 0, invalid 0\n"]);
    expect(await server.db.all("SELECT first_name, last_name FROM contacts WHERE email = ?", ["nfd@example.com"])).toEqual([{ first_name: "é".repeat(150), last_name: "한".repeat(70) }]);
  }, 60_000);

  test("imported names are keyed for the name sorts, on the tag and account rows too: Strauß beside STRAUSS, Émile beside émile, ties by id, on either backend", async () => {
    const rows = ["a@example.com,émile,STRAUSS", "b@example.com,Zoe,Émile", "c@example.com,Émile,Strauß", "d@example.com,emile,ilker", "e@example.com,,İlker"];
    const res = await importText("names.csv", `Email,First name,Last name,Company,Tags\n${rows.map((row) => `${row},Acme,imported`).join("\n")}\n`);
    expect([res.code, res.stdout]).toEqual([0, "imported: 5 rows: created 5, updated 0, unchanged 0, invalid 0\n"]);
    const token = readFileSync(server.tokenFile, "utf8").trim();
    const byEmail = new Map((await server.db.all<{ id: string; email: string }>("SELECT id, email FROM contacts")).map((row) => [row.id, row.email]));
    const account = (await server.db.get<{ id: string }>("SELECT id FROM accounts"))!.id;
    const sorted = async (query: string) => {
      const res = await fetch(`${server.url}/public/v1/contacts?sort_direction=asc&${query}`, { headers: { authorization: `Bearer ${token}` } });
      return ((await res.json()) as { data: { id: string }[] }).data.map((contact) => byEmail.get(contact.id));
    };
    // ties (one key) by id: the rows were created in the file's order
    const byFirst = ["e@example.com", "d@example.com", "b@example.com", "a@example.com", "c@example.com"];
    const byLast = ["d@example.com", "e@example.com", "a@example.com", "c@example.com", "b@example.com"];
    const read: Record<string, unknown> = {};
    for (const filter of ["", "&tag=imported", `&account_id=${account}`]) {
      read[`first${filter}`] = await sorted(`sort_by=first_name${filter}`);
      read[`last${filter}`] = await sorted(`sort_by=last_name${filter}`);
    }
    expect(read).toEqual({
      first: byFirst, last: byLast,
      "first&tag=imported": byFirst, "last&tag=imported": byLast,
      [`first&account_id=${account}`]: byFirst, [`last&account_id=${account}`]: byLast,
    });
  }, 60_000);

  test("a company spelled in its capitals (GROSSHANDEL SÜD GMBH) is the account of its usual spelling (Großhandel Süd GmbH): one account", async () => {
    const res = await importText("capitals.csv", "Email,Company\na@example.com,Großhandel Süd GmbH\nb@example.com,GROSSHANDEL SÜD GMBH\n");
    expect([res.code, res.stdout]).toEqual([0, "imported: 2 rows: created 2, updated 0, unchanged 0, invalid 0\n"]);
    const accounts = (await contactAccounts()).map((row) => [row.email, row.name]);
    expect([await server.count("accounts"), accounts]).toEqual([1, [["a@example.com", "Großhandel Süd GmbH"], ["b@example.com", "Großhandel Süd GmbH"]]]);
  }, 60_000);

  test("a company name with a no-break space or a doubled space (pasted from a web page, typed twice) is the account of its usual spelling, in an import and a batch upsert: one account", async () => {
    const res = await importText("spaces.csv", "Email,Company\na@example.com,Acme GmbH\nb@example.com,Acme\u00a0GmbH\nc@example.com,Acme  GmbH\n");
    expect([res.code, res.stdout, res.stderr.split("\n")[1]]).toEqual([0, "imported: 3 rows: created 3, updated 0, unchanged 0, invalid 0\n", "accounts: 1 created or found"]);
    const token = readFileSync(server.tokenFile, "utf8").trim();
    const batch = await fetch(`${server.url}/public/v1/accounts/batch`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify({ items: [{ name: "ACME\u2003 GMBH " }] }) });
    expect(((await batch.json()) as { data: { status: string }[] }).data.map((result) => result.status)).toEqual(["updated"]);
    expect([await server.count("accounts"), (await contactAccounts()).map((row) => row.email)]).toEqual([1, ["a@example.com", "b@example.com", "c@example.com"]]);
  }, 60_000);

  test("a row the server's body parser refuses (a NUL in a cell, a company name with one) is an invalid row; every other row is imported", async () => {
    const file = join(server.dir, "nul.csv");
    const rows = Array.from({ length: 250 }, (_, i) => `d${i + 1}@example.com,${i + 1 === 150 ? "Nu\u0000l" : "N"},${i + 1 === 200 ? "Bad\u0000Co" : ""}`);
    writeFileSync(file, `Email,First Name,Company\n${rows.join("\n")}\n`);
    const res = await runImport([file, ...apiArgs()]);
    expect([res.code, res.stdout]).toEqual([1, `imported: 250 rows: created 248, updated 0, unchanged 0, invalid 2\ninvalid rows with their errors: ${join(server.dir, "nul.invalid.csv")}\n`]);
    expect(await server.count()).toBe(248);
    const invalid = parseCsv(readFileSync(join(server.dir, "nul.invalid.csv"), "utf8")).slice(1).map((r) => [r[3], r[4]]);
    expect(invalid).toEqual([
      ["150", "First Name: contains the NUL character (\\u0000), which no text field can hold"],
      ["200", "Company: contains the NUL character (\\u0000), which no text field can hold"],
    ]);
  }, 60_000);

  test("JSON Lines the API would refuse (an id past 2^53, a NUL, an unpaired surrogate, a constructor key) are invalid rows, kept as written; the others are imported", async () => {
    const file = join(server.dir, "refused.jsonl");
    const lines = [
      '{"id": 9007199254740993, "email": "j1@example.com"}',
      '{"id": 9007199254740992, "email": "j2@example.com"}',
      '{"email": "v1@example.com", "custom_fields": {"meta": {"constructor": "x"}}}',
      '{"email": "v2@example.com", "first_name": "\\u0000x"}',
      '{"email": "v3@example.com", "first_name": "\\ud800x"}',
      '{"email": "ok@example.com", "id": "9007199254740993"}',
    ];
    writeFileSync(file, `${lines.join("\n")}\n`);
    const res = await runImport([file, ...apiArgs()]);
    expect([res.code, res.stdout]).toEqual([1, `imported: 6 rows: created 1, updated 0, unchanged 0, invalid 5\ninvalid rows with their errors: ${join(server.dir, "refused.invalid.jsonl")}\n`]);
    expect(await server.db.all("SELECT email, external_id FROM contacts")).toEqual([{ email: "ok@example.com", external_id: "9007199254740993" }]);
    const precision = "is a number beyond ±9007199254740991 (2^53 - 1), past which numbers lose precision; send it as a string";
    expect(readFileSync(join(server.dir, "refused.invalid.jsonl"), "utf8").trim().split("\n")).toEqual([
      `{"id": 9007199254740993, "email": "j1@example.com","import_row":1,"import_errors":["id: ${precision}"]}`,
      `{"id": 9007199254740992, "email": "j2@example.com","import_row":2,"import_errors":["id: ${precision}"]}`,
      '{"email": "v1@example.com", "custom_fields": {"meta": {"constructor": "x"}},"import_row":3,"import_errors":["custom_fields.meta: uses the key \\"constructor\\", which is refused to protect object prototypes"]}',
      '{"email": "v2@example.com", "first_name": "\\u0000x","import_row":4,"import_errors":["first_name: contains the NUL character (\\\\u0000), which no text field can hold"]}',
      '{"email": "v3@example.com", "first_name": "\\ud800x","import_row":5,"import_errors":["first_name: contains an unpaired UTF-16 surrogate escape, which is not valid Unicode"]}',
    ]);
  }, 60_000);

  test("an invalid row goes to the invalid-rows file as written, columns with blank names included", async () => {
    const file = join(server.dir, "blank-names.csv");
    writeFileSync(file, "Email,First Name,,Notes,\nbad-email,B,x2,n,y2\n");
    const res = await runImport([file, ...apiArgs()]);
    expect(res.code).toBe(1);
    expect(parseCsv(readFileSync(join(server.dir, "blank-names.invalid.csv"), "utf8"))).toEqual([
      ["Email", "First Name", "", "Notes", "", "import_row", "import_errors"],
      ["bad-email", "B", "x2", "n", "y2", "1", "Email: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null"],
    ]);
  }, 60_000);

  test("--trial, then the whole file: the first row is created once, even with no email or external id to match it, and its replay is said so", async () => {
    const file = join(server.dir, "trial.csv");
    writeFileSync(file, "First Name,Last Name,Phone\nTrial,Person,+1 555 0100\nOther,Person,+1 555 0101\n");
    expect((await runImport([file, "--trial", ...apiArgs()])).stdout).toBe("trial, one row sent: 1 rows: created 1, updated 0, unchanged 0, invalid 0\n");
    const whole = await runImport([file, ...apiArgs()]);
    expect([whole.code, whole.stdout, replayNotes(whole.stderr)]).toEqual([
      0,
      "imported: 2 rows: created 2, updated 0, unchanged 0, invalid 0\n",
      ["1 row was answered from an earlier run of this file or its --trial (within 24 h): its counts are that run's, and nothing was applied again"],
    ]);
    expect(await server.db.all("SELECT first_name FROM contacts ORDER BY first_name")).toEqual([{ first_name: "Other" }, { first_name: "Trial" }]);
  }, 60_000);

  test("the same file again within 24 h says all its batches, the first row's too, were answered from the earlier run, not applied again", async () => {
    const files: [string, string, string][] = [
      ["again.csv", "Email,First Name\nr1@example.com,R1\nr2@example.com,R2\nr3@example.com,R3\n", "3 rows were answered from an earlier run of this file or its --trial (within 24 h): their counts are that run's, and nothing was applied again"],
      ["one.csv", "Email,First Name\nsolo@example.com,Solo\n", "1 row was answered from an earlier run of this file or its --trial (within 24 h): its counts are that run's, and nothing was applied again"],
    ];
    for (const [name, content, note] of files) {
      const file = join(server.dir, name);
      writeFileSync(file, content);
      const first = await runImport([file, ...apiArgs()]);
      await server.db.run("DELETE FROM contacts");
      const again = await runImport([file, ...apiArgs()]);
      const rows = content.split("\n").length - 2;
      const summary = `imported: ${rows} rows: created ${rows}, updated 0, unchanged 0, invalid 0\n`;
      expect({ name, first: [first.code, first.stdout, replayNotes(first.stderr)], again: [again.code, again.stdout, replayNotes(again.stderr)] }).toEqual({ name, first: [0, summary, []], again: [0, summary, [note]] });
    }
    // Answered from the first run: the contacts deleted since are not made again.
    expect(await server.count()).toBe(0);
  }, 60_000);
});

describe("crm import contacts: accounts", () => {
  test("a row's company is added to the contact's accounts, never replacing the others: one already linked changes nothing, a person on two rows with two companies keeps both", async () => {
    const partner = await apiCreate("/public/v1/accounts", { name: "Partner Ltd", domain: "partner.example" });
    const acme = await apiCreate("/public/v1/accounts", { name: "Acme", domain: "acme.example" });
    const ada = await apiCreate("/public/v1/contacts", { email: "ada@acme.example", first_name: "Ada", account_ids: [acme.id, partner.id] });
    const res = await importText("trade-show.csv", "Email,First Name,Company,Website\nada@acme.example,Ada,Acme,acme.example\nbo@x.example,Bo,Acme,acme.example\nbo@x.example,Bo,Globex,\n");
    expect([res.code, res.stdout]).toEqual([0, "imported: 3 rows: created 1, updated 1, unchanged 1, invalid 0\n"]);
    expect((await api("GET", `/public/v1/contacts/${ada.id}`)).body.data).toEqual(ada);
    expect((await api("GET", `/public/v1/contacts?account_id=${partner.id}`)).body.meta.total).toBe(1);
    const bo = (await api("GET", "/public/v1/contacts?email=bo@x.example&include=accounts")).body.data;
    expect(bo.map((c: { accounts: { name: string }[] }) => c.accounts.map((a) => a.name))).toEqual([["Acme", "Globex"]]);
  }, 60_000);

  test("--trial, its contact and account deleted, then the whole file: every row is imported (the first under a key of its own), and running it again replays it all", async () => {
    const file = join(server.dir, "acme-staff.csv");
    writeFileSync(file, "Email,First Name,Company,Website\nada@acme.example,Ada,Acme,acme.example\nbob@acme.example,Bob,Acme,acme.example\ncy@acme.example,Cy,Acme,acme.example\n");
    expect((await runImport([file, "--trial", ...apiArgs()])).stdout).toBe("trial, one row sent: 1 rows: created 1, updated 0, unchanged 0, invalid 0\n");
    const [contact] = (await api("GET", "/public/v1/contacts")).body.data;
    const [account] = (await api("GET", "/public/v1/accounts")).body.data;
    expect([(await api("DELETE", `/public/v1/contacts/${contact.id}`)).status, (await api("DELETE", `/public/v1/accounts/${account.id}`)).status]).toEqual([204, 204]);
    const whole = await runImport([file, ...apiArgs()]);
    expect([whole.code, whole.stdout, replayNotes(whole.stderr)]).toEqual([0, "imported: 3 rows: created 3, updated 0, unchanged 0, invalid 0\n", []]);
    expect(await contactAccounts()).toEqual(["ada", "bob", "cy"].map((name) => ({ email: `${name}@acme.example`, name: "Acme", domain: "acme.example" })));
    const again = await runImport([file, ...apiArgs()]);
    expect([again.code, again.stdout, replayNotes(again.stderr)]).toEqual([
      0,
      "imported: 3 rows: created 3, updated 0, unchanged 0, invalid 0\n",
      ["3 rows were answered from an earlier run of this file or its --trial (within 24 h): their counts are that run's, and nothing was applied again"],
    ]);
    expect([await server.count(), await server.count("accounts")]).toEqual([3, 1]);
  }, 60_000);

  test("an import stopped part-way, one of its new accounts deleted, then run again: the account is made again and the rows naming it are imported linked to it; running it again replays it all", async () => {
    const file = join(server.dir, "staff.csv");
    writeFileSync(file, "Email,First Name,Company,Website\nada@acme.example,Ada,Acme,acme.example\nbob@globex.example,Bob,Globex,globex.example\ncy@acme.example,Cy,Acme,acme.example\n");
    // In front of the server, a proxy that refuses the second contacts batch (rows 2 and 3): the
    // accounts and the first row are sent, then the import stops, as a crash would stop it.
    let contactBatches = 0;
    const proxy = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(request) {
        const url = new URL(request.url);
        if (url.pathname === "/public/v1/contacts/batch" && ++contactBatches === 2) return Response.json({ detail: "stopped by the test" }, { status: 400 });
        const headers = new Headers(request.headers);
        headers.delete("host");
        return fetch(`${server.url}${url.pathname}${url.search}`, { method: request.method, headers, body: await request.arrayBuffer() });
      },
    });
    try {
      const stopped = await runImport([file, "--url", proxy.url.href.replace(/\/$/, ""), "--token-file", server.tokenFile]);
      expect([stopped.code, stopped.stdout, stopped.stderr.split("\n").at(-2)]).toEqual([2, "", "crm: import stopped: /public/v1/contacts/batch answered 400: stopped by the test"]);
    } finally {
      await proxy.stop(true);
    }
    const acme = (await api("GET", "/public/v1/accounts?domain=acme.example")).body.data[0];
    expect((await api("DELETE", `/public/v1/accounts/${acme.id}`)).status).toBe(204);

    const resumed = await runImport([file, ...apiArgs()]);
    expect([resumed.code, resumed.stdout, resumed.stderr.split("\n").filter((line) => line.startsWith("accounts:") || line.includes("from an earlier run"))]).toEqual([
      0,
      "imported: 3 rows: created 3, updated 0, unchanged 0, invalid 0\n",
      [
        "accounts: 2 created or found",
        'accounts: 1 no longer exists (deleted since this import or an earlier run of it found or made it), made or found again for the rows naming it: "Acme"',
        "1 row was answered from an earlier run of this file or its --trial (within 24 h): its counts are that run's, and nothing was applied again",
      ],
    ]);
    // Ada's row was answered from the stopped run: her link went with the account, as a contact deleted since is not made again.
    expect(await contactAccounts()).toEqual([
      { email: "bob@globex.example", name: "Globex", domain: "globex.example" },
      { email: "cy@acme.example", name: "Acme", domain: "acme.example" },
    ]);
    const again = await runImport([file, ...apiArgs()]);
    expect([again.code, again.stdout, replayNotes(again.stderr)]).toEqual([
      0,
      "imported: 3 rows: created 3, updated 0, unchanged 0, invalid 0\n",
      ["3 rows were answered from an earlier run of this file or its --trial (within 24 h): their counts are that run's, and nothing was applied again"],
    ]);
    expect([await server.count(), await server.count("accounts")]).toEqual([3, 2]);
  }, 60_000);

  test("a placeholder company (N/A, -, none) is no company, said on stderr by row, --dry-run too: no account groups those rows; a website beside it still names one", async () => {
    const csv = "Email,First Name,Company,Website\nann@a.example,Ann,N/A,\nben@b.example,Ben,N/A,\ncat@c.example,Cat,-,\ndan@d.example,Dan,none,dan.example\neve@e.example,Eve,Eve Ltd,\n";
    const note = 'Company: 4 values are a placeholder, each read as no company: row 1 "N/A", row 2 "N/A", row 3 "-", row 4 "none"\n';
    const dry = await importText("leads.csv", csv, "--dry-run");
    expect([dry.code, dry.stderr.split("\n").slice(1).join("\n")]).toEqual([0, note]);
    const res = await importText("leads.csv", csv);
    expect([res.code, res.stdout]).toEqual([0, "imported: 5 rows: created 5, updated 0, unchanged 0, invalid 0\n"]);
    expect(res.stderr).toEndWith(note);
    expect(await contactAccounts()).toEqual([
      { email: "dan@d.example", name: "dan.example", domain: "dan.example" },
      { email: "eve@e.example", name: "Eve Ltd", domain: null },
    ]);
  }, 60_000);
});

describe("crm import contacts: the invalid-rows file, fixed and imported again", () => {
  test("it is written as the input was: a UTF-8 BOM (Excel then opens it as UTF-8, not Windows-1252) and CRLF when the input has them, neither when it has not", async () => {
    const bad = "Email: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null";
    expect((await importText("excel.csv", "\uFEFFEmail,First name,Company\r\njose@example.com,José,Café Müller GmbH\r\nrene(at)example.com,René,Café Müller GmbH\r\n")).code).toBe(1);
    expect(readFileSync(join(server.dir, "excel.invalid.csv"), "utf8")).toBe(`\uFEFFEmail,First name,Company,import_row,import_errors\r\nrene(at)example.com,René,Café Müller GmbH,2,"${bad}"\r\n`);
    expect((await importText("plain.csv", "Email,First name\nrene(at)example.com,René\n")).code).toBe(1);
    expect(readFileSync(join(server.dir, "plain.invalid.csv"), "utf8")).toBe(`Email,First name,import_row,import_errors\nrene(at)example.com,René,1,"${bad}"\n`);
  }, 60_000);

  test("an invalid-rows file's own invalid rows keep one import_row (the first file's) and one import_errors (the latest), so their file imports too", async () => {
    const bad = "Email: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null";
    expect((await importText("people.csv", "Email,First name\ngood@example.com,Good\nbad-one,One\nbad-two,Two\n")).code).toBe(1);
    const first = readFileSync(join(server.dir, "people.invalid.csv"), "utf8");
    expect((await importText("people.invalid.csv", first.replace("bad-one", "one@example.com"))).code).toBe(1);
    const second = readFileSync(join(server.dir, "people.invalid.invalid.csv"), "utf8");
    expect(second).toBe(`Email,First name,import_row,import_errors\nbad-two,Two,3,"${bad}"\n`);
    const res = await importText("people.invalid.invalid.csv", second.replace("bad-two", "two@example.com"));
    expect([res.code, res.stdout]).toEqual([0, "imported: 1 rows: created 1, updated 0, unchanged 0, invalid 0\n"]);
    expect(await server.count()).toBe(3);
  }, 60_000);
  test("a JSON Lines line refused as written, imported again from its invalid-rows file, keeps one import_row (the first file's) and one import_errors (the latest); fixed, it imports, as does a line an older crm gave two of each", async () => {
    const precision = "id: is a number beyond ±9007199254740991 (2^53 - 1), past which numbers lose precision; send it as a string";
    const bad = "email: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null";
    expect((await importText("people.jsonl", '{"email": "ok@example.com"}\n{"id": 9007199254740993, "email": "big@example.com"}\n{"email": "bad-one"}\n')).code).toBe(1);
    const first = readFileSync(join(server.dir, "people.invalid.jsonl"), "utf8");
    expect((await importText("people.invalid.jsonl", first)).code).toBe(1);
    const second = readFileSync(join(server.dir, "people.invalid.invalid.jsonl"), "utf8");
    expect(second.split("\n")).toEqual([
      `{"id": 9007199254740993, "email": "big@example.com","import_row":2,"import_errors":[${JSON.stringify(precision)}]}`,
      `{"email":"bad-one","import_row":3,"import_errors":[${JSON.stringify(bad)}]}`,
      "",
    ]);
    const fixed = second.replace("9007199254740993", '"9007199254740993"').replace("bad-one", "one@example.com");
    const res = await importText("people.invalid.invalid.jsonl", fixed);
    expect([res.code, res.stdout]).toEqual([0, "imported: 2 rows: created 2, updated 0, unchanged 0, invalid 0\n"]);
    const older = await importText("older.invalid.jsonl", `{"email": "two@example.com", "id": 9007199254740995,"import_row":7,"import_errors":["x"],"import_row":1,"import_errors":["y"]}\n{"email": "three@example.com","import_row":8,"import_errors":["x"],"import_row":2,"import_errors":["y"]}\n`);
    expect([older.code, older.stdout]).toEqual([1, `imported: 2 rows: created 1, updated 0, unchanged 0, invalid 1\ninvalid rows with their errors: ${join(server.dir, "older.invalid.invalid.jsonl")}\n`]);
    expect(readFileSync(join(server.dir, "older.invalid.invalid.jsonl"), "utf8")).toBe(`{"email": "two@example.com", "id": 9007199254740995,"import_row":7,"import_errors":[${JSON.stringify(precision)}]}\n`);
    expect(await server.db.all("SELECT email, external_id FROM contacts ORDER BY email")).toEqual([
      { email: "big@example.com", external_id: "9007199254740993" },
      { email: "ok@example.com", external_id: null },
      { email: "one@example.com", external_id: null },
      { email: "three@example.com", external_id: null },
    ]);
  }, 60_000);
});

describe("crm import contacts: separators", () => {
  test("a semicolon-separated file (Excel's \"CSV\" in a German locale) or a tab-separated one is read with its separator, said on stderr; its invalid rows are written with it", async () => {
    const bad = "E-Mail: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null";
    const de = await importText("de.csv", '\uFEFFVorname;Nachname;E-Mail;Firma\r\nJürgen;Weiß;juergen@example.de;"Weiß; Söhne AG"\r\nHans;Meier;hans(at)example.de;Meier, Schulz & Co\r\n', "--map", "Firma=account.name");
    expect([de.code, de.stderr.split("\n").slice(0, 2)]).toEqual([1, ["read as semicolon-separated: the header has no comma", "columns: E-Mail -> email, Firma -> account.name; ignored: Vorname, Nachname"]]);
    expect(readFileSync(join(server.dir, "de.invalid.csv"), "utf8")).toBe(`\uFEFFVorname;Nachname;E-Mail;Firma;import_row;import_errors\r\nHans;Meier;hans(at)example.de;"Meier, Schulz & Co";2;"${bad}"\r\n`);
    const tab = await importText("tab.csv", "Email\tFirst name\tCompany\ntab@example.com\tTabitha\tTab, Inc.\n");
    expect([tab.code, tab.stderr.split("\n").slice(0, 2)]).toEqual([0, ["read as tab-separated: the header has no comma", "columns: Email -> email, First name -> first_name, Company -> account.name"]]);
    expect(await contactAccounts()).toEqual([
      { email: "juergen@example.de", name: "Weiß; Söhne AG", domain: null },
      { email: "tab@example.com", name: "Tab, Inc.", domain: null },
    ]);
  }, 60_000);
});

describe("crm import contacts: rows refused locally", () => {
  test("a row refused locally (a bad email, nobody named) creates no account; a row with only an external id, which only the server can judge, still brings its own", async () => {
    const first = join(server.dir, "linked.csv");
    writeFileSync(first, "ID,Email\next-1,linked@example.com\n");
    expect((await runImport([first, ...apiArgs()])).code).toBe(0);
    const file = join(server.dir, "local.csv");
    writeFileSync(file, "ID,Email,First Name,Company\n,not-an-email,,BadEmailCo\n,,,OrphanCo\next-1,,,LinkedCo\n,ok@example.com,Ok,GoodCo\n");
    const res = await runImport([file, ...apiArgs()]);
    expect([res.code, res.stdout]).toEqual([1, `imported: 4 rows: created 1, updated 1, unchanged 0, invalid 2\ninvalid rows with their errors: ${join(server.dir, "local.invalid.csv")}\n`]);
    expect(res.stderr).toContain("accounts: 2 created or found\n");
    expect(await server.db.all("SELECT name FROM accounts ORDER BY name")).toEqual([{ name: "GoodCo" }, { name: "LinkedCo" }]);
    expect(await server.db.all("SELECT c.email, a.name FROM contacts c JOIN contact_accounts ca ON ca.contact_id = c.id JOIN accounts a ON a.id = ca.account_id ORDER BY c.email")).toEqual([
      { email: "linked@example.com", name: "LinkedCo" },
      { email: "ok@example.com", name: "GoodCo" },
    ]);
    expect(parseCsv(readFileSync(join(server.dir, "local.invalid.csv"), "utf8")).slice(1).map((r) => [r[4], r[5]])).toEqual([
      ["1", "Email: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null"],
      ["2", "row: needs at least one of email, first_name, last_name, phone"],
    ]);
  }, 60_000);

  test("rows of empty cells (,,, as spreadsheets write emptied rows) are skipped, not invalid rows, and the summary counts them", async () => {
    const file = join(server.dir, "emptied.csv");
    writeFileSync(file, "Email,First name,Last name,Company\r\na@example.com,A,One,\r\n,,,\r\nb@example.com,B,Two,\r\n, ,,\r\n,,,\r\n");
    const dry = await runImport([file, "--dry-run"]);
    expect([dry.code, dry.stdout]).toEqual([0, "dry run, nothing sent: 2 rows: valid 2, invalid 0; skipped 3 rows of empty cells\n"]);
    const real = await runImport([file, ...apiArgs()]);
    expect([real.code, real.stdout]).toEqual([0, "imported: 2 rows: created 2, updated 0, unchanged 0, invalid 0; skipped 3 rows of empty cells\n"]);
    expect(await server.count()).toBe(2);
  }, 60_000);

  test("a record with fewer fields than the header (a line break outside quotes cut it in two) is an invalid row naming its field count, not a contact padded with empty cells", async () => {
    const file = join(server.dir, "split.csv");
    writeFileSync(file, "First name,Last name,Notes,Email\r\nAnn,Lee,met at the fair\r\ncalled back,ann.lee@example.com\r\nBob,Ray,,bob.ray@example.com\r\n");
    const short = (n: number) => `"line: has ${n} fields where the header names 4 columns: a line break outside quotes, or cells left out"`;
    const invalidRows = `First name,Last name,Notes,Email,import_row,import_errors\r\nAnn,Lee,met at the fair,,1,${short(3)}\r\ncalled back,ann.lee@example.com,,,2,${short(2)}\r\n`;
    const dry = await runImport([file, "--dry-run", "--invalid-file", join(server.dir, "dry.invalid.csv")]);
    expect([dry.code, dry.stdout.split("\n")[0], readFileSync(join(server.dir, "dry.invalid.csv"), "utf8")]).toEqual([1, "dry run, nothing sent: 3 rows: valid 1, invalid 2", invalidRows]);
    const real = await runImport([file, ...apiArgs()]);
    expect([real.code, real.stdout.split("\n")[0], readFileSync(join(server.dir, "split.invalid.csv"), "utf8")]).toEqual([1, "imported: 3 rows: created 1, updated 0, unchanged 0, invalid 2", invalidRows]);
    expect(await server.db.all("SELECT first_name, last_name, email FROM contacts")).toEqual([{ first_name: "Bob", last_name: "Ray", email: "bob.ray@example.com" }]);
  }, 60_000);

  test("--dry-run refuses what every real import refuses, a row naming nobody: a row of an ignored column only, a JSON Lines {}, a file where no column maps", async () => {
    const nobody = "row: needs at least one of email, first_name, last_name, phone";
    // name, content, invalid-rows file
    const files: [string, string, string][] = [
      ["notes-only.csv", "Email,First name,Notes\n,,met at the fair\nann@example.com,Ann,\n", `Email,First name,Notes,import_row,import_errors\n,,met at the fair,1,"${nobody}"\n`],
      ["empty-object.jsonl", '{}\n{"email": "bob@example.com"}\n', `${JSON.stringify({ import_row: 1, import_errors: [nobody] })}\n`],
      ["none-mapped.csv", "E-Post,Navn\ncid@example.com,Cid\n", `E-Post,Navn,import_row,import_errors\ncid@example.com,Cid,1,"${nobody}"\n`],
    ];
    const invalidRows = (path: string) => (existsSync(path) ? readFileSync(path, "utf8") : null);
    for (const [name, content, invalid] of files) {
      const file = join(server.dir, name);
      writeFileSync(file, content);
      const dry = await runImport([file, "--dry-run", "--invalid-file", join(server.dir, `dry-${name}`)]);
      const real = await runImport([file, ...apiArgs(), "--invalid-file", join(server.dir, `real-${name}`)]);
      const rows = name === "none-mapped.csv" ? 1 : 2;
      expect({ name, dry: [dry.code, dry.stdout.split("\n")[0], invalidRows(join(server.dir, `dry-${name}`))], real: [real.code, real.stdout.split("\n")[0], invalidRows(join(server.dir, `real-${name}`))] }).toEqual({
        name,
        dry: [1, `dry run, nothing sent: ${rows} rows: valid ${rows - 1}, invalid 1`, invalid],
        real: [1, `imported: ${rows} rows: created ${rows - 1}, updated 0, unchanged 0, invalid 1`, invalid],
      });
    }
  }, 60_000);
});

describe("crm import contacts: crash and re-run", () => {
  test("SIGKILLed halfway and run again: no duplicates, the same final state and summary as one uninterrupted run", async () => {
    const csv = writeContactsCsv(server.dir);
    const reference = await importServer();
    try {
      const whole = await runImport([writeContactsCsv(reference.dir).path, "--url", reference.url, "--token-file", reference.tokenFile]);
      expect(whole.stdout).toStartWith(summaryLine("imported", csv.rows, csv.expected));

      // At 300 writes per second the import lasts about 2 s, long enough to stop it in the middle.
      const { token } = await createApiToken(server.db, "slow", Date.now(), { readPerSecond: 300, readBurst: 100, writePerSecond: 300, writeBurst: 100 });
      writeFileSync(server.tokenFile, token);
      const first = startImport([csv.path, ...apiArgs()]);
      while (await server.count() < 1000 && first.proc.exitCode === null) await Bun.sleep(5);
      expect(first.proc.exitCode).toBeNull();
      first.proc.kill("SIGKILL");
      const killed = await first.done();
      expect(killed.code).not.toBe(0);
      expect(killed.stdout).toBe("");
      const partial = await server.count();
      expect(partial).toBeLessThan(csv.expected.created);

      const again = await runImport([csv.path, ...apiArgs()]);
      expect(again.stdout).toStartWith(summaryLine("imported", csv.rows, csv.expected));
      expect(await server.count()).toBe(csv.expected.created);
      expect((await server.db.all("SELECT email FROM contacts GROUP BY email HAVING count(*) > 1"))).toEqual([]);
      expect(await server.snapshot()).toEqual(await reference.snapshot());
    } finally {
      await reference.stop();
    }
  }, 90_000);
});

describe("crm import contacts: errors", () => {
  test("plain http to another machine is refused before anything is sent, the token would cross the network in clear; --allow-plain-http sends it all the same; loopback http needs no flag", async () => {
    const file = join(server.dir, "one.csv");
    writeFileSync(file, "Email\nada@example.com\n");
    const refusal = (host: string) => ({
      code: 2,
      stdout: "",
      stderr: `crm: import: --url http://${host} is plain http to another machine: every request would carry the API token across the network unencrypted; use https://, or pass --allow-plain-http on a network you trust with it\n`,
    });
    // Nothing listens there: refused before any connection, the path and query not repeated.
    expect(await runImport([file, "--url", "http://192.0.2.1:8080/crm?x=1", "--token-file", server.tokenFile])).toEqual(refusal("192.0.2.1:8080"));
    expect(await runImport([file, "--url", "http://crm.example.com", "--token-file", server.tokenFile])).toEqual(refusal("crm.example.com"));
    expect(await server.count()).toBe(0);
    // 0.0.0.0 is no loopback name, and on Linux it reaches the server listening on 127.0.0.1.
    const port = new URL(server.url).port;
    expect(await runImport([file, "--url", `http://0.0.0.0:${port}`, "--token-file", server.tokenFile])).toEqual(refusal(`0.0.0.0:${port}`));
    expect(await runImport([file, "--url", `http://0.0.0.0:${port}`, "--token-file", server.tokenFile, "--allow-plain-http"])).toMatchObject({ code: 0, stdout: summaryLine("imported", 1, { created: 1, updated: 0, unchanged: 0, invalid: 0 }) });
    // Sent again under the same keys: replayed, counted as the first run counted it.
    expect(await runImport([file, "--url", `http://localhost:${port}`, "--token-file", server.tokenFile])).toMatchObject({ code: 0, stdout: summaryLine("imported", 1, { created: 1, updated: 0, unchanged: 0, invalid: 0 }) });
    expect(await server.count()).toBe(1);
  }, 60_000);

  test("columns named like Object.prototype's members (Constructor, toString) are ignored like any unknown column, not a crash", async () => {
    const file = join(server.dir, "odd-headers.csv");
    writeFileSync(file, "Constructor,Email,toString,__proto__,hasOwnProperty,custom_fields.constructor,custom_fields.plan\nx,ada@example.com,y,z,w,v,pro\n");
    const run = await runImport([file, ...apiArgs()]);
    expect(run).toMatchObject({ code: 0, stdout: summaryLine("imported", 1, { created: 1, updated: 0, unchanged: 0, invalid: 0 }) });
    expect(run.stderr).toStartWith("columns: Email -> email, custom_fields.plan -> custom_fields.plan; ignored: Constructor, toString, __proto__, hasOwnProperty, custom_fields.constructor\n");
    const mapped = await runImport([file, ...apiArgs(), "--map", "Constructor=custom_fields.__proto__"]);
    expect(mapped).toMatchObject({ code: 2, stdout: "" });
    expect(mapped.stderr).toStartWith('crm: --map: "Constructor=custom_fields.__proto__" is not COLUMN=FIELD with FIELD one of ');
    expect(await server.db.all("SELECT email, first_name FROM contacts")).toEqual([{ email: "ada@example.com", first_name: null }]);
    expect((await server.db.get<{ properties: string }>("SELECT properties FROM contacts"))!.properties).toContain('"plan":"pro"');
  }, 60_000);

  test("--log-level, or the log_level of a --config file, is taken as every command takes it; the service's other settings are not the importer's", async () => {
    const file = join(server.dir, "one.csv");
    writeFileSync(file, "Email\nada@example.com\n");
    // The service's crm.toml: its other settings (a database URL file this user may not read, say) are not read.
    const config = join(server.dir, "crm.toml");
    writeFileSync(config, 'log_level = "debug"\nport = 1\ndatabase_url_file = "/nonexistent/database-url"\n');
    const done = { code: 0, stdout: "dry run, nothing sent: 1 rows: valid 1, invalid 0\n", stderr: "columns: Email -> email\n" };
    for (const args of [["--log-level", "debug", file], [file, "--log-level=debug"], ["--config", config, file]]) {
      expect([args, await runImport([...args, "--dry-run"])]).toEqual([args, done]);
    }
    expect(await runImport([file, "--dry-run", "--log-level", "loud"])).toEqual({ code: 2, stdout: "", stderr: 'crm: invalid --log-level: "loud" is not one of debug, info, warn, error\n' });
    expect(await runImport([file, "--dry-run", "--log-level", "debug", "--log-level", "warn"])).toEqual({ code: 2, stdout: "", stderr: "crm: --log-level is given twice; give it once\n" });
    const unexpected = await runImport([file, "--dry-run", "--port", "1"]);
    expect(unexpected).toMatchObject({ code: 2, stdout: "" });
    expect(unexpected.stderr).toStartWith("crm: import: unexpected --port 1 (usage: import contacts ");
  });

  test("column names from the file print their control and bidi characters as escapes: in the mapping line, the --map error's list and the repeated-column error", async () => {
    // A header from a customer's file could otherwise retitle the window, clear the screen (the
    // mapping and warnings with it) or draw the rest of the line backwards.
    const file = join(server.dir, "escapes.csv");
    writeFileSync(file, "Email,\u001b]0;PWNED\u0007\u001b[2J\u001b[31mNotes,\u202eeton\u202c\nada@example.com,hi,there\n");
    const shown = "\\u001b]0;PWNED\\u0007\\u001b[2J\\u001b[31mNotes, \\u202eeton\\u202c";
    expect(await runImport([file, "--dry-run"])).toEqual({ code: 0, stdout: "dry run, nothing sent: 1 rows: valid 1, invalid 0\n", stderr: `columns: Email -> email; ignored: ${shown}\n` });
    expect(await runImport([file, "--dry-run", "--map", "Nope=email"])).toEqual({ code: 2, stdout: "", stderr: `crm: --map: the file has no column "Nope" (columns: Email, ${shown})\n` });
    const lines = join(server.dir, "escapes.jsonl");
    writeFileSync(lines, '{"email":"ada@example.com","\\u001b[2Jk":1,"\\u2066x\\u2069":2}\n');
    expect((await runImport([lines, "--dry-run"])).stderr).toBe("columns: email -> email; ignored: \\u001b[2Jk, \\u2066x\\u2069\n");
    const repeated = join(server.dir, "repeated-bidi.csv");
    writeFileSync(repeated, "Email,\u202eX,\u202eX\nada@example.com,a,b\n");
    expect(await runImport([repeated, "--dry-run"])).toEqual({ code: 2, stdout: "", stderr: `crm: ${repeated}: the header names the column "\\u202eX" twice (columns 2 and 3); rename one\n` });
  });

  test("a custom field's key from the file prints its bidi characters as escapes in the mapping line, on both sides of the arrow", async () => {
    const file = join(server.dir, "custom-bidi.csv");
    writeFileSync(file, "Email,custom_fields.\u202eplan\nada@example.com,pro\n");
    const key = "custom_fields.\\u202eplan";
    expect(await runImport([file, "--dry-run"])).toEqual({ code: 0, stdout: "dry run, nothing sent: 1 rows: valid 1, invalid 0\n", stderr: `columns: Email -> email, ${key} -> ${key}\n` });
  });

  test("a redirect (307, 308) is not followed: the rows would go to whatever origin it names, whose answer would count as imported; it stops the import naming the status", async () => {
    const elsewhere: string[] = [];
    const other = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(request) {
        const body = (await request.json()) as { items: unknown[] };
        elsewhere.push(JSON.stringify(body.items));
        return Response.json({ data: body.items.map((_, index) => ({ index, status: "created", id: `con_${index}` })) });
      },
    });
    // A misconfigured proxy, or a moved host, in front of the CRM.
    const front = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (request) => new Response(null, { status: 307, headers: { location: `http://localhost:${other.port}${new URL(request.url).pathname}` } }) });
    try {
      const file = join(server.dir, "people.csv");
      writeFileSync(file, "first_name,email\nAda,ada@customer.example\nGrace,grace@customer.example\n");
      expect(await runImport([file, "--url", `http://127.0.0.1:${front.port}`, "--token-file", server.tokenFile])).toEqual({
        code: 2,
        stdout: "",
        stderr: `columns: first_name -> first_name, email -> email\ncrm: import stopped: /public/v1/contacts/batch answered 307, a redirect to http://localhost:${other.port}/public/v1/contacts/batch, not followed: the API never redirects, so --url names something else (a proxy, a moved host); point --url at the CRM server itself\n`,
      });
      expect(elsewhere).toEqual([]);
    } finally {
      front.stop(true);
      other.stop(true);
    }
  }, 60_000);

  test("a redirect's Location is named by its origin and path: its credentials and query string (a signed URL, a login's token) stay off the terminal and CI logs; a relative one is resolved", async () => {
    let location = "";
    const front = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response(null, { status: 302, headers: { location } }) });
    try {
      const file = join(server.dir, "people.csv");
      writeFileSync(file, "first_name,email\nAda,ada@customer.example\n");
      const stopped = async (to: string) => {
        location = to;
        const res = await runImport([file, "--url", `http://127.0.0.1:${front.port}`, "--token-file", server.tokenFile]);
        return { code: res.code, line: res.stderr.split("\n")[1] };
      };
      const line = (to: string) => `crm: import stopped: /public/v1/contacts/batch answered 302, a redirect to ${to}, not followed: the API never redirects, so --url names something else (a proxy, a moved host); point --url at the CRM server itself`;
      expect(await stopped("https://sso:hunter2@login.example/authorize?sig=SECRETSIG#frag")).toEqual({ code: 2, line: line("https://login.example/authorize (its query string left out)") });
      expect(await stopped("/login?next=%2F&token=SECRETTOKEN")).toEqual({ code: 2, line: line(`http://127.0.0.1:${front.port}/login (its query string left out)`) });
      expect(await stopped("https://login.example:8443/moved")).toEqual({ code: 2, line: line("https://login.example:8443/moved") });
    } finally {
      front.stop(true);
    }
  }, 60_000);

  test("a refused token, an unknown --map column, a malformed CSV or JSON Lines file and a missing --url each stop with one clear line", async () => {
    const csv = writeContactsCsv(server.dir, 10);
    writeFileSync(join(server.dir, "bad-token"), "crm_nope\n");
    const refused = await runImport([csv.path, "--url", server.url, "--token-file", join(server.dir, "bad-token")]);
    expect({ code: refused.code, stderr: refused.stderr.split("\n").slice(-2) }).toEqual({
      code: 2,
      stderr: [
        "crm: import stopped: /public/v1/accounts/batch answered 401: The API token is unknown or revoked. Check that --token-file holds a current token of this server (crm token list).",
        "",
      ],
    });
    const unmapped = await runImport([csv.path, ...apiArgs(), "--map", "Nope=email"]);
    expect(unmapped).toMatchObject({ code: 2, stdout: "" });
    expect(unmapped.stderr).toStartWith('crm: --map: the file has no column "Nope" (columns: ID, Email, First Name, Last Name, Phone, Company, Website, Notes, Tags)');
    const twice = await runImport([csv.path, ...apiArgs(), "--map", "Email=email,Notes=email"]);
    expect(twice).toEqual({ code: 2, stdout: "", stderr: 'crm: --map: the columns "Email" and "Notes" both map to email; a field takes one column\n' });
    const broken = join(server.dir, "broken.csv");
    writeFileSync(broken, 'Email,Name\n"a@example.com,Ada\n');
    expect(await runImport([broken, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: ${broken}: line 2: a quoted field is never closed\n` });
    const brokenLines = join(server.dir, "broken.jsonl");
    writeFileSync(brokenLines, '{"email":"a@example.com"}\n{"email":\n');
    expect(await runImport([brokenLines, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: ${brokenLines}: line 2 is not JSON (JSON Parse error: Unexpected EOF)\n` });
    const arrayLine = join(server.dir, "array.jsonl");
    writeFileSync(arrayLine, '{"email":"a@example.com"}\n["b@example.com"]\n');
    expect(await runImport([arrayLine, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: ${arrayLine}: line 2 is not a JSON object\n` });
    const latin1 = join(server.dir, "latin1.csv");
    writeFileSync(latin1, Buffer.concat([Buffer.from("Email,First Name\nada@example.com,Ada\njose@example.com,Jos"), Buffer.from([0xe9]), Buffer.from("\n")]));
    expect(await runImport([latin1, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: ${latin1}: line 3 is not UTF-8; save the file as UTF-8 (in Excel: "CSV UTF-8") and run the import again\n` });
    // A real U+FFFD before the bad byte is UTF-8 like any other character: the line named is the bad byte's.
    writeFileSync(latin1, Buffer.concat([Buffer.from("Email,First Name\nb14@example.com,\uFFFD\nb15@example.com,Jos"), Buffer.from([0xe9]), Buffer.from("\n")]));
    expect(await runImport([latin1, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: ${latin1}: line 3 is not UTF-8; save the file as UTF-8 (in Excel: "CSV UTF-8") and run the import again\n` });
    const noUrl = await runImport([csv.path]);
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toStartWith("crm: import needs --url and --token-file (or --dry-run)");
    expect(await server.count()).toBe(0);
  }, 60_000);

  test("a file rewritten while it is imported (same name and size) stops the import, saying what was sent: no contact goes without its account, no invalid-rows file is made from the changed file", async () => {
    /**
     * importChanging imports this text through a proxy to the server that rewrites the file (Acme
     * becomes Acmf) when the first request to `path` arrives; progress lines are left out.
     */
    const importChanging = async (name: string, text: string, path: string) => {
      const file = join(server.dir, name);
      writeFileSync(file, text);
      let changed = false;
      const proxy = Bun.serve({
        hostname: "127.0.0.1",
        port: 0,
        async fetch(request) {
          const url = new URL(request.url);
          if (!changed && url.pathname === path) {
            changed = true;
            writeFileSync(file, readFileSync(file, "utf8").replaceAll("Acme", "Acmf"));
          }
          const headers = new Headers(request.headers);
          headers.delete("host");
          return fetch(`${server.url}${url.pathname}${url.search}`, { method: request.method, headers, body: await request.arrayBuffer() });
        },
      });
      try {
        const result = await runImport([file, "--url", proxy.url.href.replace(/\/$/, ""), "--token-file", server.tokenFile]);
        return { file, ...result, stderr: result.stderr.replace(/^progress: .*\n/gm, "") };
      } finally {
        await proxy.stop(true);
      }
    };
    const stopped = (file: string, sent: string) =>
      `crm: import stopped: ${file} changed while the import read it (its inode, size or modification time is not what its first read found); ${sent}; import it again once nothing writes to it\n`;
    const columns = "columns: Email -> email, First name -> first_name, Company -> account.name; ignored: Notes\n";

    // Between the accounts and the contacts: no contact is sent.
    const beforeContacts = await importChanging("before-contacts.csv", "Email,First name,Company,Notes\na@example.com,Ann,Acme,\nb@example.com,Bob,Acme,\n", "/public/v1/accounts/batch");
    expect(beforeContacts).toEqual({
      file: beforeContacts.file,
      code: 2,
      stdout: "",
      stderr: `${columns}accounts: 1 created or found\n${stopped(beforeContacts.file, "sent before it did: accounts: 1 created or found; 0 of 2 rows: created 0, updated 0, unchanged 0, invalid 0")}`,
    });
    expect(await server.count()).toBe(0);

    // After the first contact (sent alone), while the contacts are read: the rows after the first
    // megabyte, read after the change, are not sent (those before it are the file as checked).
    const notes = "n".repeat(30_000);
    const rows = Array.from({ length: 100 }, (_, i) => `p${i + 1}@example.com,P${i + 1},Acme,${notes}\n`);
    const afterFirst = await importChanging("after-first.csv", `Email,First name,Company,Notes\n${rows.join("")}`, "/public/v1/contacts/batch");
    expect(afterFirst).toEqual({
      file: afterFirst.file,
      code: 2,
      stdout: "",
      stderr: `${columns}accounts: 1 created or found\n${stopped(afterFirst.file, "sent before it did: accounts: 1 created or found; 1 of 100 rows: created 1, updated 0, unchanged 0, invalid 0")}`,
    });
    expect(await contactAccounts()).toEqual([{ email: "p1@example.com", name: "Acme", domain: null }]);
    expect(await server.count()).toBe(1);

    // After every row was read and sent: the import stands, but the changed file no longer holds the invalid rows.
    const afterAll = await importChanging("after-all.csv", "Email,First name,Company,Notes\nlast@example.com,Ann,Acme,\nnot-an-email,Bob,Acme,\n", "/public/v1/contacts/batch");
    expect(afterAll).toMatchObject({ code: 2, stdout: "imported: 2 rows: created 1, updated 0, unchanged 0, invalid 1\n" });
    expect(afterAll.stderr.split("\n").at(-2)).toBe(`crm: cannot write the invalid rows to ${join(server.dir, "after-all.invalid.csv")}: ${afterAll.file} changed while the import read it (its inode, size or modification time is not what its first read found)`);
    expect(existsSync(join(server.dir, "after-all.invalid.csv"))).toBe(false);
  }, 60_000);

  test("a UTF-16 file (Excel's \"Unicode Text\"), with a byte order mark or without, little- or big-endian, stops in one line naming the encoding, not as rows of NULs", async () => {
    const text = "Email,First Name\nada@example.com,Ada\nbob@example.com,Bob\n";
    const big = (le: Buffer) => Buffer.from(le).swap16();
    const files: [string, Buffer][] = [
      ["utf16le.csv", Buffer.from(text, "utf16le")],
      ["utf16be.csv", big(Buffer.from(text, "utf16le"))],
      ["utf16le-bom.csv", Buffer.from(`\uFEFF${text}`, "utf16le")],
      ["utf16be-bom.jsonl", big(Buffer.from('\uFEFF{"email":"ada@example.com"}\n', "utf16le"))],
    ];
    const answers = [];
    const expected = [];
    for (const [name, bytes] of files) {
      const file = join(server.dir, name);
      writeFileSync(file, bytes);
      answers.push(await runImport([file, ...apiArgs()]));
      expected.push({ code: 2, stdout: "", stderr: `crm: ${file} is UTF-16, not UTF-8; save the file as UTF-8 (in Excel: "CSV UTF-8") and run the import again\n` });
    }
    expect(answers).toEqual(expected);
    expect(await server.count()).toBe(0);
  }, 60_000);
});

describe("crm import contacts: input, token and invalid-rows files", () => {
  const oneInvalidRow = (name = "inv1.csv") => {
    const file = join(server.dir, name);
    writeFileSync(file, "Email,First Name\nada@example.com,Ada\nnot-an-email,Bob\n");
    return file;
  };

  test("an invalid-rows file that is a directory, in a missing folder or the input itself is refused before anything is sent, with or without --dry-run", async () => {
    const file = oneInvalidRow();
    const refusal = (path: string, why: string) => ({ code: 2, stdout: "", stderr: `crm: import: the invalid rows would go to ${path}, ${why}; choose another file with --invalid-file\n` });
    expect(await runImport([file, ...apiArgs(), "--invalid-file", server.dir])).toEqual(refusal(server.dir, "a directory"));
    const missingFolder = join(server.dir, "no-such-folder", "invalid.csv");
    expect(await runImport([file, ...apiArgs(), "--invalid-file", missingFolder])).toEqual(refusal(missingFolder, `which cannot be written (ENOENT: no such file or directory, access '${join(server.dir, "no-such-folder")}')`));
    const defaultPath = join(server.dir, "inv1.invalid.csv");
    mkdirSync(defaultPath);
    expect(await runImport([file, "--dry-run"])).toEqual(refusal(defaultPath, "a directory"));
    // The same file by another spelling, and through a symbolic link.
    const sameFile = join(server.dir, ".", "inv1.csv");
    symlinkSync(file, join(server.dir, "link.csv"));
    expect(await runImport([file, ...apiArgs(), "--invalid-file", sameFile])).toEqual(refusal(sameFile, "the input file itself"));
    expect(await runImport([file, "--dry-run", "--invalid-file", join(server.dir, "link.csv")])).toEqual(refusal(join(server.dir, "link.csv"), "the input file itself"));
    expect(readFileSync(file, "utf8")).toBe("Email,First Name\nada@example.com,Ada\nnot-an-email,Bob\n");
    expect(await server.count()).toBe(0);
  }, 60_000);

  test("an invalid-rows file that fails to write (a full disk) is named after the summary of what was imported, exit 2", async () => {
    const file = oneInvalidRow();
    const res = await runImport([file, ...apiArgs(), "--invalid-file", "/dev/full"]);
    expect(res.code).toBe(2);
    expect(res.stdout).toBe(summaryLine("imported", 2, { created: 1, updated: 0, unchanged: 0, invalid: 1 }));
    expect(res.stderr).toEndWith("\ncrm: cannot write the invalid rows to /dev/full: ENOSPC: no space left on device, write '/dev/full'\n");
    expect(await server.db.all("SELECT email FROM contacts")).toEqual([{ email: "ada@example.com" }]);
    const dry = await runImport([file, "--dry-run", "--invalid-file", "/dev/full"]);
    expect(dry).toEqual({ code: 2, stdout: "dry run, nothing sent: 2 rows: valid 1, invalid 1\n", stderr: "columns: Email -> email, First Name -> first_name\ncrm: cannot write the invalid rows to /dev/full: ENOSPC: no space left on device, write '/dev/full'\n" });
  }, 60_000);

  test("the invalid-rows file is 0600 under a umask that would take its owner's write away (0277), and its owner, with no power over modes, writes it", async () => {
    const file = oneInvalidRow();
    const invalidFile = join(server.dir, "inv1.invalid.csv");
    expect(await runImport([file, "--dry-run"], [...SHUT_OUT, ...underUmask("0277")])).toEqual({
      code: 1,
      stdout: `dry run, nothing sent: 2 rows: valid 1, invalid 1\ninvalid rows with their errors: ${invalidFile}\n`,
      stderr: "columns: Email -> email, First Name -> first_name\n",
    });
    expect(statSync(invalidFile).mode & 0o777).toBe(0o600);
  }, 60_000);

  test("an --invalid-file that is a symbolic link to a file not there yet creates it 0600 under the usual umask (0022); a link to a file already there empties it and keeps its mode", async () => {
    const file = oneInvalidRow();
    const target = join(server.dir, "target.csv");
    const link = join(server.dir, "out.csv");
    symlinkSync(target, link);
    const written = { code: 1, stdout: `dry run, nothing sent: 2 rows: valid 1, invalid 1\ninvalid rows with their errors: ${link}\n`, stderr: "columns: Email -> email, First Name -> first_name\n" };
    expect(await runImport([file, "--dry-run", "--invalid-file", link], underUmask("0022"))).toEqual(written);
    expect(statSync(target).mode & 0o777).toBe(0o600);
    const rows = readFileSync(target, "utf8");
    expect(rows).toBe('Email,First Name,import_row,import_errors\nnot-an-email,Bob,2,"Email: must be an email address of at most 254 characters, its domain counted in ASCII form (müller.de as xn--mller-kva.de), or null"\n');
    writeFileSync(target, `${rows}an older run's rows\n`);
    chmodSync(target, 0o640);
    expect(await runImport([file, "--dry-run", "--invalid-file", link], underUmask("0022"))).toEqual(written);
    expect(statSync(target).mode & 0o777).toBe(0o640);
    expect(readFileSync(target, "utf8")).toBe(rows);
  }, 60_000);

  test("the same file again with another --map gets batches of its own; a file changed under the same name and size is told to take a new name, not to run again", async () => {
    const file = join(server.dir, "two-emails.csv");
    writeFileSync(file, "Mail,Other\nada@example.com,grace@example.com\n");
    const created = summaryLine("imported", 1, { created: 1, updated: 0, unchanged: 0, invalid: 0 });
    expect(await runImport([file, ...apiArgs(), "--map", "Mail=email"])).toMatchObject({ code: 0, stdout: created });
    expect(await runImport([file, ...apiArgs(), "--map", "Other=email,Mail=-"])).toMatchObject({ code: 0, stdout: created });
    expect(await server.db.all("SELECT email FROM contacts ORDER BY email")).toEqual([{ email: "ada@example.com" }, { email: "grace@example.com" }]);

    writeFileSync(file, "Mail,Other\nbob@example.com,grace@example.com\n");
    expect(await runImport([file, ...apiArgs(), "--map", "Mail=email"])).toEqual({
      code: 2,
      stdout: "",
      stderr: "columns: Mail -> email; ignored: Other\ncrm: import stopped: /public/v1/contacts/batch answered 422 idempotency-key-reused: the file changed since an earlier import of a file with its name and size (in the last 24 h), or that import was begun by an older crm; give a changed file a new name and import it again, and finish an older crm's import with that crm\n",
    });
  }, 60_000);

  test("a token file of more than one line or a directory, a directory or a pipe as the input, an empty JSON Lines file and a repeated column each stop at once with one line", async () => {
    const file = oneInvalidRow();
    const twoLines = join(server.dir, "two-line-token");
    writeFileSync(twoLines, `${readFileSync(server.tokenFile, "utf8").trim()}\nsecond line\n`);
    expect(await runImport([file, "--url", server.url, "--token-file", twoLines])).toEqual({ code: 2, stdout: "", stderr: `crm: import: the token file ${twoLines} must hold one API token on one line\n` });
    const folder = join(server.dir, "adir.csv");
    mkdirSync(folder);
    expect(await runImport([folder, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: import: ${folder} is a directory, not a .csv or .jsonl file\n` });
    expect(await runImport([file, "--url", server.url, "--token-file", server.dir])).toEqual({ code: 2, stdout: "", stderr: `crm: import: cannot read the token file ${server.dir}: it is a directory, not a file\n` });
    const pipe = join(server.dir, "pipe.csv");
    expect(Bun.spawnSync(["mkfifo", pipe]).exitCode).toBe(0);
    expect(await runImport([pipe, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: import: ${pipe} is not a regular file (a pipe or a device); the importer reads its file more than once: save it to a file first\n` });
    const emptyJsonLines = join(server.dir, "empty.jsonl");
    writeFileSync(emptyJsonLines, "\n\n");
    expect(await runImport([emptyJsonLines, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: ${emptyJsonLines} is empty: each line must be a JSON object\n` });
    const repeated = join(server.dir, "repeated.csv");
    writeFileSync(repeated, "Email,Name,Email\nada@example.com,Ada,grace@example.com\n");
    expect(await runImport([repeated, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: ${repeated}: the header names the column "Email" twice (columns 1 and 3); rename one\n` });
    // A file that cannot be read (here one that answers every read with EIO) is named, not a stack trace.
    const unreadable = join(server.dir, "unreadable.csv");
    symlinkSync("/proc/self/mem", unreadable);
    expect(await runImport([unreadable, ...apiArgs()])).toEqual({ code: 2, stdout: "", stderr: `crm: import: cannot read ${unreadable}: EIO: i/o error, read\n` });
    expect(await runImport([file, "--url", server.url, "--token-file", "/proc/self/mem"])).toEqual({ code: 2, stdout: "", stderr: "crm: import: cannot read the token file /proc/self/mem: EIO: i/o error, read\n" });
    // Blank header cells (a spreadsheet's trailing empty columns) are never mapped: not a repeat.
    const trailing = join(server.dir, "trailing.csv");
    writeFileSync(trailing, "Email,,\nada@example.com,,\n");
    expect(await runImport([trailing, ...apiArgs()])).toMatchObject({ code: 0, stdout: summaryLine("imported", 1, { created: 1, updated: 0, unchanged: 0, invalid: 0 }) });
  }, 60_000);

  test("a token file the importer may not read, behind a directory or by its own mode, is named as unreadable, not as missing", async () => {
    const file = oneInvalidRow();
    const folder = join(server.dir, "tokens");
    const token = join(folder, "token");
    mkdirSync(folder);
    writeFileSync(token, readFileSync(server.tokenFile));
    const unreadable = { code: 2, stdout: "", stderr: `crm: import: cannot read the token file ${token}: permission denied (run the import as a user who may read it)\n` };
    try {
      chmodSync(folder, 0o000);
      const behindDirectory = await runImport([file, "--url", server.url, "--token-file", token], SHUT_OUT);
      chmodSync(folder, 0o700);
      chmodSync(token, 0o000);
      const fileItself = await runImport([file, "--url", server.url, "--token-file", token], SHUT_OUT);
      expect([behindDirectory, fileItself]).toEqual([unreadable, unreadable]);
    } finally {
      chmodSync(folder, 0o700);
      chmodSync(token, 0o600);
    }
    expect(await server.count()).toBe(0);
  });
});
