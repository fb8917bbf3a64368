import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { createHarness, type Harness } from "../support/harness.ts";
import { contactCount, validation } from "../foundation/support.ts";

// Requests no well-behaved client sends, each answered with a problem that names what is wrong,
// the same on SQLite and PostgreSQL, and changing nothing.

let h: Harness;
beforeEach(async () => {
  h = await createHarness({ allowPrivateTargets: true });
});
afterEach(async () => await h.close());

const SUBSCRIPTION = { target_url: "http://127.0.0.1:9/hook", events: ["contact.created"] };

async function createContact(body: Record<string, unknown> = { first_name: "Ada" }): Promise<string> {
  const res = await h.json("POST", "/public/v1/contacts", { body });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

async function createSubscription(): Promise<string> {
  const res = await h.json("POST", "/public/v1/webhook-subscriptions", { body: SUBSCRIPTION });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

describe("hostile requests: an encoded NUL in the request target", () => {
  test("a %00 in a query parameter, an id or a tag is 400 before anything is read, and changes nothing", async () => {
    const id = await createContact({ first_name: "Ada", tags: ["vip"] });
    const refusal = {
      type: "urn:crm:problem:invalid-request-target",
      title: "Bad Request",
      status: 400,
      detail: "The request target contains %00, an encoded NUL character, which no path segment or query parameter may hold.",
    };
    const requests: [string, string][] = [
      ["GET", "/public/v1/contacts?email=%00"],
      ["GET", "/public/v1/contacts?full_name=a%00b"],
      ["GET", "/public/v1/accounts?name=%00"],
      ["GET", "/public/v1/contacts/con_%00"],
      ["DELETE", `/public/v1/contacts/${id}/tags/vip%00`],
      ["DELETE", `/public/v1/contacts/${id}?x=%00`],
      ["GET", "/public/v1/webhook-deliveries?event_id=%00"],
    ];
    for (const [method, path] of requests) {
      const res = await h.json(method, path);
      expect({ path, status: res.status, type: res.headers.get("content-type"), body: res.body }).toEqual({ path, status: 400, type: "application/problem+json", body: refusal });
    }
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).body.data.tags).toEqual(["vip"]);
  });
});

describe("hostile requests: percent escapes that do not decode", () => {
  test("%E9 alone (not UTF-8), a bare % or %zz in a path or query is 400, and the tag is not removed", async () => {
    const id = await createContact({ first_name: "Ada", tags: ["caf\u00e9", "100%"] });
    for (const [method, path] of [["DELETE", `/public/v1/contacts/${id}/tags/caf%E9`], ["DELETE", `/public/v1/contacts/${id}/tags/100%`], ["GET", "/public/v1/contacts?full_name=a%zz"]] as const) {
      const res = await h.json(method, path);
      expect({ path, status: res.status, body: res.body }).toEqual({
        path,
        status: 400,
        body: { type: "urn:crm:problem:invalid-request-target", title: "Bad Request", status: 400, detail: "The request target has a percent escape that does not decode to UTF-8 text (such as %E9 alone, or % not followed by two hex digits)." },
      });
    }
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).body.data.tags).toEqual(["caf\u00e9", "100%"]);
    const removed = await h.json("DELETE", `/public/v1/contacts/${id}/tags/caf%C3%A9`);
    expect([removed.status, removed.body.data.tags]).toEqual([200, ["100%"]]);
  });
});

describe("hostile requests: compressed bodies", () => {
  test("a body sent with Content-Encoding gzip is 415, not read as if it were the JSON, and creates nothing", async () => {
    const res = await h.app.handle(
      new Request("http://localhost/public/v1/contacts", {
        method: "POST",
        headers: { authorization: `Bearer ${h.token}`, "content-type": "application/json", "content-encoding": "gzip" },
        body: Bun.gzipSync(JSON.stringify({ first_name: "Ada" })),
      }),
    );
    expect({ status: res.status, accept: res.headers.get("accept-encoding"), body: await res.json() }).toEqual({
      status: 415,
      accept: "identity",
      body: { type: "urn:crm:problem:unsupported-media-type", title: "Unsupported Media Type", status: 415, detail: "Content-Encoding gzip is not accepted; send the request body uncompressed." },
    });
    expect(await contactCount(h)).toBe(0);
  });
});

describe("hostile requests: tampered cursors", () => {
  /** forged is a cursor in the clear form cursors had before they were sealed (sort, direction, digest of the filters, sort value, id): one a client can make. */
  const forged = (parts: unknown[]) => Buffer.from(JSON.stringify(parts)).toString("base64url");
  /** unfiltered is that form's digest of a list's filters, none given: its `count` empty values. */
  const unfiltered = (count: number) => createHash("sha256").update("\u0000".repeat(count - 1)).digest("base64url");

  const refused = validation([{ parameter: "cursor", detail: "is not a cursor from meta.next_cursor of this same list (same sort and filters), or is one from before the service was upgraded or its key replaced: read the list again from its first page" }]);

  test("a sort value of the wrong type, or text with a NUL, is 422 on the cursor, never a database error", async () => {
    const contact = await createContact({ first_name: "Ada", email: "ada@example.com" });
    await createContact({ first_name: "Grace", email: "grace@example.com" });
    const subscription = await createSubscription();
    await createSubscription();
    const lists: [string, unknown[]][] = [
      ["/public/v1/webhook-subscriptions?per_page=1", ["created_at", "desc", unfiltered(1), "abc", subscription]],
      ["/public/v1/webhook-subscriptions?per_page=1", ["created_at", "desc", unfiltered(1), 1.5, subscription]],
      ["/public/v1/contacts?per_page=1", ["created_at", "desc", unfiltered(7), "2026-11-21T10:00:00Z", contact]],
      ["/public/v1/contacts?per_page=1&sort_by=email", ["email", "desc", unfiltered(7), 42, contact]],
      ["/public/v1/contacts?per_page=1&sort_by=last_name", ["last_name", "desc", unfiltered(7), "a\u0000", contact]],
      ["/public/v1/contacts?per_page=1", ["created_at", "desc", unfiltered(7), 0, "con_\u0000"]],
      ["/public/v1/contacts?per_page=1", ["created_at", "desc", unfiltered(7), 0, 7]],
    ];
    for (const [path, parts] of lists) {
      const res = await h.json("GET", `${path}&cursor=${forged(parts)}`);
      expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 422, body: refused });
    }
  });

  test("an untouched cursor still reads the next page", async () => {
    for (const name of ["Ada", "Grace"]) await createContact({ first_name: name });
    const first = await h.json("GET", "/public/v1/contacts?per_page=1&sort_by=first_name&sort_direction=asc");
    const next = await h.json("GET", `/public/v1/contacts?per_page=1&sort_by=first_name&sort_direction=asc&cursor=${first.body.meta.next_cursor}`);
    expect([first.body.data[0].first_name, next.status, next.body.data[0].first_name]).toEqual(["Ada", 200, "Grace"]);
  });
});

describe("hostile requests: fields and parameters a route does not take", () => {
  test("a body field a schema does not declare is 422 naming it and the fields there are, and nothing is created", async () => {
    const contactId = await createContact();
    const subscriptionId = await createSubscription();
    const userId = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@example.com" } })).body.data.id;
    const cases: [string, string, Record<string, unknown>, Record<string, string>[]][] = [
      ["POST", "/public/v1/users", { name: "Ada", email: "ada@example.com", role: "admin" }, [{ pointer: "/role", detail: "is not a field here; known: name, email" }]],
      ["PATCH", `/public/v1/users/${userId}`, { nmae: "Grace B." }, [{ pointer: "/nmae", detail: "is not a field here; known: name, email" }]],
      ["POST", "/public/v1/webhook-subscriptions", { ...SUBSCRIPTION, max_rat: 5 }, [{ pointer: "/max_rat", detail: "is not a field here; known: target_url, description, events, max_rate" }]],
      ["PATCH", `/public/v1/webhook-subscriptions/${subscriptionId}`, { max_rat: 5 }, [{ pointer: "/max_rat", detail: "is not a field here; known: description, max_rate, target_url, events" }]],
      ["POST", `/public/v1/webhook-subscriptions/${subscriptionId}/rotate-secret`, { grace: 1 }, [{ pointer: "/grace", detail: "is not a field here; known: grace_hours" }]],
      ["POST", "/public/v1/contacts/batch", { items: [{ first_name: "Eve" }], upsert: true }, [{ pointer: "/upsert", detail: "is not a field here; known: items, merge_custom_fields, add_account_ids" }]],
      ["POST", "/public/v1/accounts/batch", { items: [{ name: "Acme" }], dry_run: true }, [{ pointer: "/dry_run", detail: "is not a field here; known: items" }]],
      ["POST", `/public/v1/contacts/${contactId}/tags`, { tag: "vip", color: "red" }, [{ pointer: "/color", detail: "is not a field here; known: tag" }]],
      ["POST", `/public/v1/webhook-subscriptions/${subscriptionId}/pause`, { reason: "maintenance" }, [{ pointer: "/reason", detail: "is not a field here; this route takes no body" }]],
      // RFC 6901: "/" and "~" in a key are escaped in its pointer
      ["POST", `/public/v1/webhook-subscriptions/${subscriptionId}/pause`, { "a/b": 1, "c~d": 2 }, [{ pointer: "/a~1b", detail: "is not a field here; this route takes no body" }, { pointer: "/c~0d", detail: "is not a field here; this route takes no body" }]],
    ];
    for (const [method, path, body, errors] of cases) {
      const res = await h.json(method, path, { body });
      expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 422, body: validation(errors) });
    }
    expect(await contactCount(h)).toBe(1);
    expect((await h.json("GET", "/public/v1/users")).body.data.map((u: { name: string }) => u.name)).toEqual(["Grace"]);
    const subscription = (await h.json("GET", `/public/v1/webhook-subscriptions/${subscriptionId}`)).body.data;
    expect([subscription.status, (await h.json("GET", `/public/v1/contacts/${contactId}`)).body.data.tags]).toEqual(["active", []]);
  });

  test("an action that takes no body accepts an empty object", async () => {
    const subscriptionId = await createSubscription();
    const res = await h.json("POST", `/public/v1/webhook-subscriptions/${subscriptionId}/pause`, { body: {} });
    expect([res.status, res.body.data.status]).toEqual([200, "paused"]);
  });

  test("a query parameter on a route that takes none is 422 naming it, and the request does nothing", async () => {
    const id = await createContact();
    const cases: [string, string, string[]][] = [
      ["DELETE", `/public/v1/contacts/${id}?force=true`, ["force"]],
      ["POST", "/public/v1/contacts?dry_run=1&notify=0", ["dry_run", "notify"]],
      ["GET", "/public/v1/event-types?lang=en", ["lang"]],
    ];
    for (const [method, path, names] of cases) {
      const res = await h.json(method, path, method === "POST" ? { body: { first_name: "Eve" } } : {});
      expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 422, body: validation(names.map((parameter) => ({ parameter, detail: "is not a parameter of this route, which takes none" }))) });
    }
    expect(await contactCount(h)).toBe(1);
  });
});

describe("hostile requests: sorting a list that has one order", () => {
  test("sort_by or sort_direction on the subscription, delivery or deleted lists is 422 naming it, not ignored", async () => {
    await createSubscription();
    const lists: [string, string][] = [
      ["/public/v1/webhook-subscriptions", "page, per_page, cursor, event"],
      ["/public/v1/webhook-deliveries", "page, per_page, cursor, subscription_id, event, event_id, request_id, status, created_after"],
      ["/public/v1/contacts/deleted", "page, per_page, cursor, since"],
      ["/public/v1/accounts/deleted", "page, per_page, cursor, since"],
      ["/public/v1/users/deleted", "page, per_page, cursor, since"],
    ];
    for (const [path, known] of lists) {
      const res = await h.json("GET", `${path}?sort_direction=asc&sort_by=created_at`);
      expect({ path, status: res.status, body: res.body }).toEqual({
        path,
        status: 422,
        body: validation(
          ["sort_direction", "sort_by"].map((parameter) => ({ parameter, detail: `is not a parameter of this list; known: ${known}` })),
        ),
      });
      expect((await h.json("GET", `${path}?per_page=5`)).status).toBe(200);
    }
  });
});

describe("hostile requests: the tag '..' and paths ending in /", () => {
  test("a URL client sends the removal of a tag '..' as DELETE /contacts/ID/: that is 404, and the contact stays", async () => {
    const id = await createContact({ first_name: "Ada", tags: ["vip"] });
    const sent = new URL(`http://crm.example/public/v1/contacts/${id}/tags/${encodeURIComponent("..")}`).pathname;
    expect(sent).toBe(`/public/v1/contacts/${id}/`);
    const removal = await h.json("DELETE", sent);
    expect({ status: removal.status, body: removal.body }).toEqual({
      status: 404,
      body: { type: "urn:crm:problem:not-found", title: "Not Found", status: 404, detail: `No route matches DELETE /public/v1/contacts/${id}/: a path with an id does not end in "/".` },
    });
    expect((await h.json("GET", `/public/v1/contacts/${id}/`)).status).toBe(404);
    expect((await h.json("GET", `/public/v1/contacts/${id}`)).body.data.tags).toEqual(["vip"]);
  });

  test("a tag '.' or '..' is refused wherever a tag is given, since no URL could remove it", async () => {
    const id = await createContact();
    const tagError = 'must be a tag of 1 to 100 characters, not "." or ".."';
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Eve", tags: ["ok", ".."] } });
    const patched = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { tags: ["."] } });
    const added = await h.json("POST", `/public/v1/contacts/${id}/tags`, { body: { tag: ".." } });
    expect([created.body, patched.body, added.body]).toEqual([
      validation([{ pointer: "/tags/1", detail: tagError }]),
      validation([{ pointer: "/tags/0", detail: tagError }]),
      validation([{ pointer: "/tag", detail: tagError }]),
    ]);
    const dots = await h.json("POST", `/public/v1/contacts/${id}/tags`, { body: { tag: "..." } });
    expect([dots.status, dots.body.data.tags, await contactCount(h)]).toEqual([200, ["..."], 1]);
  });

  test("a tag listed twice is refused, as a repeated account or user id is, instead of being stored twice", async () => {
    const id = await createContact();
    const created = await h.json("POST", "/public/v1/contacts", { body: { first_name: "Eve", tags: ["x", "x"] } });
    const patched = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { tags: ["a", "b", "a"] } });
    expect([created.body, patched.body]).toEqual([validation([{ pointer: "/tags/1", detail: "repeats item 0" }]), validation([{ pointer: "/tags/2", detail: "repeats item 0" }])]);
    const cased = await h.json("PATCH", `/public/v1/contacts/${id}`, { body: { tags: ["a", "A"] } });
    expect([cased.status, cased.body.data.tags, await contactCount(h)]).toEqual([200, ["a", "A"], 1]);
  });
});

describe("hostile requests: filters no record could match", () => {
  test("a malformed id filter on deliveries, or an empty account name or domain, is 422 naming it, not an empty page", async () => {
    const cases: [string, string, string][] = [
      ["/public/v1/webhook-deliveries?subscription_id=bad", "subscription_id", "must be a subscription id (sub_...)"],
      ["/public/v1/webhook-deliveries?event_id=", "event_id", "must be an event id (evt_...)"],
      ["/public/v1/accounts?name=", "name", "must be 1 to 200 characters"],
      ["/public/v1/accounts?domain=", "domain", "must be 1 to 253 characters"],
    ];
    for (const [path, parameter, detail] of cases) {
      const res = await h.json("GET", path);
      expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 422, body: validation([{ parameter, detail }]) });
    }
  });
});

describe("hostile requests: HEAD", () => {
  test("HEAD with a list's parameters answers as GET does, without the body; a parameter GET refuses is refused the same", async () => {
    const id = await createContact();
    for (const path of ["/public/v1/contacts?per_page=1&sort_by=email", `/public/v1/contacts/${id}?include=accounts`]) {
      const [get, head] = [await h.request("GET", path), await h.request("HEAD", path)];
      expect({ path, status: head.status, type: head.headers.get("content-type"), body: await head.text() }).toEqual({ path, status: get.status, type: get.headers.get("content-type"), body: "" });
      expect(get.status).toBe(200);
    }
    const refused = await h.request("HEAD", "/public/v1/contacts?per_page=1&colour=red");
    expect([refused.status, (await h.request("GET", "/public/v1/contacts?per_page=1&colour=red")).status]).toEqual([422, 422]);
  });
});

describe("hostile requests: dates that do not exist", () => {
  test("February 31 or hour 24 in a filter is 422 naming the parameter, not rolled over into March", async () => {
    const detail = "must be an RFC 3339 date-time, e.g. 2026-11-21T10:00:00Z";
    for (const path of ["/public/v1/contacts?created_after=2026-02-31T00:00:00Z", "/public/v1/accounts?updated_after=2026-11-21T24:00:00Z", "/public/v1/webhook-deliveries?created_after=2026-04-31T00:00:00Z"]) {
      const parameter = new URL(path, "http://x").searchParams.keys().next().value!;
      const res = await h.json("GET", path);
      expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 422, body: validation([{ parameter, detail }]) });
    }
  });
});

describe("hostile requests: another method on a fixed path beside an id route", () => {
  test("GET /contacts/batch or DELETE /accounts/deleted is 405 with the path's own methods, not a search for the id 'batch'; so is another method on a fixed path ending in /", async () => {
    const cases: [string, string, string][] = [
      ["GET", "/public/v1/contacts/batch", "POST"],
      ["PATCH", "/public/v1/contacts/deleted", "GET, HEAD"],
      ["DELETE", "/public/v1/contacts/deleted", "GET, HEAD"],
      ["GET", "/public/v1/accounts/batch", "POST"],
      ["PUT", "/public/v1/accounts/batch", "POST"],
      ["DELETE", "/public/v1/accounts/deleted", "GET, HEAD"],
      // The router serves POST /contacts/batch/ and GET /contacts/deleted/: the path is known with its "/" too.
      ["GET", "/public/v1/contacts/batch/", "POST"],
      ["DELETE", "/public/v1/contacts/deleted/", "GET, HEAD"],
      ["PUT", "/public/v1/accounts/batch/", "POST"],
      ["PUT", "/public/v1/contacts/", "POST, GET, HEAD"],
      // The probes and the metrics too: a load balancer's or scraper's misconfigured method hears what the path takes.
      ["PUT", "/metrics/", "GET, HEAD"],
      ["POST", "/healthz/", "GET, HEAD"],
      ["DELETE", "/readyz/", "GET, HEAD"],
    ];
    for (const [method, path, allow] of cases) {
      const res = await h.json(method, path, method === "PATCH" || method === "PUT" ? { body: {} } : {});
      expect({ path, status: res.status, allow: res.headers.get("allow"), body: res.body }).toEqual({
        path,
        status: 405,
        allow,
        body: { type: "urn:crm:problem:method-not-allowed", title: "Method Not Allowed", status: 405, detail: `${method} is not allowed on ${path}; allowed: ${allow}.` },
      });
    }
    const served = await h.json("GET", "/public/v1/contacts/deleted/");
    expect([served.status, served.body.data]).toEqual([200, []]);
  });
});
