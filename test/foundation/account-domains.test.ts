import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createHarness, type Harness } from "../support/harness.ts";
import { validation } from "./support.ts";

// An account's domain is a host name (s36 sdk audit, finding 1): the batch upsert and crm import
// match accounts by it, so a value no host has ("..", "-") made unrelated companies one account,
// and a trailing dot (engines.example., the same DNS name) made one company two.

let h: Harness;
beforeEach(async () => {
  h = await createHarness();
});
afterEach(async () => await h.close());

const REFUSED = validation([{ pointer: "/domain", detail: "must be a domain name like example.com, or null" }]);
const label = (length: number, letter = "l") => letter.repeat(length);
/** NOT_HOST_NAMES are domains the format refuses: empty labels, hyphens at a label's end, a label over 63 characters, a name over 253, one label alone, an all-numeric top label, invalid punycode. */
const NOT_HOST_NAMES = [".", "..", "...", "-", "a..b", ".acme.example", "acme.example..", "-a.com", "a-.com", "a.-b.com", `${label(64)}.com`, [label(63), label(63), label(63), label(62)].join("."), "acme", "localhost", "192.0.2.1", "xn--zz.example", "-müller.de", "müller-.de", "acme_corp.example", "acme.example:80"];

/** domainsOf lists the stored domain of every account, oldest first. */
const domainsOf = async () => (await h.rt.db.all<{ name: string; domain: string | null }>("SELECT name, domain FROM accounts ORDER BY created_at, id")).map((row) => [row.name, row.domain]);

describe("account domains: host names", () => {
  test("POST and PATCH refuse a domain that is no host name, whatever its spelling, and store nothing", async () => {
    const made = await h.json("POST", "/public/v1/accounts", { body: { name: "Acme", domain: "acme.example" } });
    for (const domain of NOT_HOST_NAMES) {
      expect([domain, (await h.json("POST", "/public/v1/accounts", { body: { name: "Other", domain } })).body]).toEqual([domain, REFUSED]);
      expect([domain, (await h.json("PATCH", `/public/v1/accounts/${made.body.data.id}`, { body: { domain } })).body]).toEqual([domain, REFUSED]);
    }
    expect(await domainsOf()).toEqual([["Acme", "acme.example"]]);
  });

  test("labels of 63 characters, a name of 253 and a Unicode name are taken; one trailing dot is dropped, so engines.example. is engines.example", async () => {
    const longest = [label(63, "a"), label(63, "b"), label(63, "c"), label(61, "d")].join(".");
    expect(longest.length).toBe(253);
    const taken = [`${label(63)}.example`, longest, "a-b.example", "xn--mller-kva.de", "1.example", "engines.example.", "MÜLLER.DE."];
    const stored: unknown[] = [];
    for (const domain of taken) {
      const res = await h.json("POST", "/public/v1/accounts", { body: { name: domain.slice(0, 20), domain } });
      stored.push([res.status, res.body.data?.domain]);
    }
    expect(stored).toEqual([
      [201, `${label(63)}.example`],
      [201, longest],
      [201, "a-b.example"],
      [201, "xn--mller-kva.de"],
      [201, "1.example"],
      [201, "engines.example"],
      [201, "xn--mller-kva.de"],
    ]);
    const patched = await h.json("PATCH", `/public/v1/accounts/${(await h.json("GET", "/public/v1/accounts?domain=1.example")).body.data[0].id}`, { body: { domain: "One.Example." } });
    expect([patched.status, patched.body.data.domain]).toEqual([200, "one.example"]);
  });

  test("the domain filter finds an account by either spelling, the trailing dot too", async () => {
    const made = (await h.json("POST", "/public/v1/accounts", { body: { name: "Engines", domain: "engines.example." } })).body.data;
    for (const domain of ["engines.example", "engines.example.", "ENGINES.EXAMPLE."]) {
      expect([domain, (await h.json("GET", `/public/v1/accounts?domain=${encodeURIComponent(domain)}`)).body.data.map((a: { id: string }) => a.id)]).toEqual([domain, [made.id]]);
    }
  });

  test("a batch item whose domain is no host name is invalid, and renames nothing; one with a trailing dot updates the account of that domain, not a second one", async () => {
    const alpha = (await h.json("POST", "/public/v1/accounts", { body: { name: "Alpha GmbH" } })).body.data;
    const engines = (await h.json("POST", "/public/v1/accounts", { body: { name: "Engines", domain: "engines.example" } })).body.data;
    const res = await h.json("POST", "/public/v1/accounts/batch", {
      body: { items: [{ name: "Beta AG", domain: ".." }, { name: "Gamma", domain: "-" }, { name: "Engines", domain: "engines.example.", tier: "gold" }, { name: "Alpha GmbH", domain: "alpha.example." }] },
    });
    expect(res.body).toEqual({
      data: [
        { status: "invalid", errors: [{ pointer: "/items/0/domain", detail: "must be a domain name like example.com, or null" }] },
        { status: "invalid", errors: [{ pointer: "/items/1/domain", detail: "must be a domain name like example.com, or null" }] },
        { status: "updated", id: engines.id },
        { status: "updated", id: alpha.id },
      ],
    });
    expect(await domainsOf()).toEqual([
      ["Alpha GmbH", "alpha.example"],
      ["Engines", "engines.example"],
    ]);
  });

  test("a domain stored before the format was enforced stays readable, found by its filter, and its account renamed; a batch item can no longer match it by that domain", async () => {
    const alpha = (await h.json("POST", "/public/v1/accounts", { body: { name: "Alpha GmbH" } })).body.data;
    await h.rt.db.write((tx) => tx.run("UPDATE accounts SET domain = '..' WHERE id = ?", [alpha.id]));
    expect((await h.json("GET", `/public/v1/accounts/${alpha.id}`)).body.data.domain).toBe("..");
    expect((await h.json("GET", "/public/v1/accounts?domain=..")).body.data.map((a: { id: string }) => a.id)).toEqual([alpha.id]);
    const renamed = await h.json("PATCH", `/public/v1/accounts/${alpha.id}`, { body: { name: "Alpha AG" } });
    expect([renamed.status, renamed.body.data.name, renamed.body.data.domain]).toEqual([200, "Alpha AG", ".."]);
    const batch = await h.json("POST", "/public/v1/accounts/batch", { body: { items: [{ name: "Beta AG", domain: ".." }] } });
    expect(batch.body.data[0].status).toBe("invalid");
    expect(await domainsOf()).toEqual([["Alpha AG", ".."]]);
  });
});
