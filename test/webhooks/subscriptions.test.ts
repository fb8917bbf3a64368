import { afterEach, describe, expect, test } from "bun:test";
import { expectProblem, ISO, validation } from "../foundation/support.ts";
import type { Database, Db } from "../../server/db/sql.ts";
import { SecretBox } from "../../server/webhooks/secrets.ts";
import { failResetDeliveries, LOST_SECRET_REASON, resetSecretsKey, rotateSecret } from "../../server/webhooks/service.ts";
import { disableSubscription } from "../../server/webhooks/store.ts";
import { createLogger } from "../../server/shared/log.ts";
import { createHarness, type Harness } from "../support/harness.ts";

const SUB_ID = /^sub_[0-9A-Z]{26}$/;
const SECRET = /^whsec_[A-Za-z0-9+/]{43}=$/;
const MASKED = /^whsec_[A-Za-z0-9+/]{4}…$/;
const KINDS = "contact.created, contact.updated, contact.deleted, account.created, account.updated, account.deleted, webhook.ping, subscription.disabled, delivery.exhausted";

let h: Harness;
afterEach(() => h?.close());

const create = (body: unknown, headers: Record<string, string> = {}) => h.json("POST", "/public/v1/webhook-subscriptions", { body, headers });

describe("webhook subscriptions: happy paths", () => {
  test("create answers 201 with the whole record and the secret in full", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const res = await create({ target_url: "https://hooks.example.com/crm?x=1", description: "CRM sync", events: ["contact.created", "contact.updated"] });
    expect(res.status).toBe(201);
    const data = res.body.data;
    expect(data).toEqual({
      id: expect.stringMatching(SUB_ID),
      target_url: "https://hooks.example.com/crm?x=1",
      description: "CRM sync",
      events: ["contact.created", "contact.updated"],
      status: "active",
      disabled_at: null,
      disabled_reason: null,
      disabled_by: null,
      paused_at: null,
      paused_by: null,
      max_rate: null,
      failing_since: null,
      held_until: null,
      secret: expect.stringMatching(SECRET),
      secret_rotated_at: null,
      previous_secret_expires_at: null,
      created_at: expect.stringMatching(ISO),
      updated_at: data.created_at,
    });
    expect(Buffer.from(data.secret.slice(6), "base64").length).toBe(32);
  });

  test("get and list mask the secret; description defaults to null", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const created = (await create({ target_url: "http://127.0.0.1:9/x", events: ["contact.deleted"] })).body.data;
    const masked = { ...created, secret: `${created.secret.slice(0, 10)}…` };
    expect(masked.secret).toMatch(MASKED);
    expect(created.description).toBeNull();
    const one = await h.json("GET", `/public/v1/webhook-subscriptions/${created.id}`);
    expect(one).toMatchObject({ status: 200, body: { data: masked } });
    const list = await h.json("GET", "/public/v1/webhook-subscriptions");
    expect(list.body).toEqual({ data: [masked], meta: { current_page: 1, last_page: 1, per_page: 25, total: 1, next_cursor: null } });
  });

  test("list is newest first, paginated, with a cursor, and filtered by event", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push((await create({ target_url: `http://127.0.0.1:9/${i}`, events: i % 2 ? ["contact.updated"] : ["contact.created", "contact.deleted"] })).body.data.id);
    }
    const page2 = await h.json("GET", "/public/v1/webhook-subscriptions?per_page=2&page=2");
    expect(page2.body.data.map((s: any) => s.id)).toEqual([ids[2], ids[1]]);
    expect(page2.body.meta).toEqual({ current_page: 2, last_page: 3, per_page: 2, total: 5, next_cursor: expect.any(String) });
    const first = await h.json("GET", "/public/v1/webhook-subscriptions?per_page=2");
    const next = await h.json("GET", `/public/v1/webhook-subscriptions?per_page=2&cursor=${first.body.meta.next_cursor}`);
    expect(next.body.data.map((s: any) => s.id)).toEqual([ids[2], ids[1]]);
    const updated = await h.json("GET", "/public/v1/webhook-subscriptions?event=contact.updated");
    expect(updated.body.data.map((s: any) => s.id)).toEqual([ids[3], ids[1]]);
    expect(updated.body.meta.total).toBe(2);
    const deleted = await h.json("GET", "/public/v1/webhook-subscriptions?event=contact.deleted");
    expect(deleted.body.data.map((s: any) => s.id)).toEqual([ids[4], ids[2], ids[0]]);
  });

  test("delete answers 204, then the subscription is 404 and gone from the list", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const { id } = (await create({ target_url: "http://127.0.0.1:9/x", events: ["contact.created"] })).body.data;
    const res = await h.request("DELETE", `/public/v1/webhook-subscriptions/${id}`);
    expect(res.status).toBe(204);
    expect(await res.text()).toBe("");
    expectProblem(await h.json("GET", `/public/v1/webhook-subscriptions/${id}`), 404, "not-found");
    expectProblem(await h.json("DELETE", `/public/v1/webhook-subscriptions/${id}`), 404, "not-found");
    expect((await h.json("GET", "/public/v1/webhook-subscriptions")).body.data).toEqual([]);
  });

  test("the same Idempotency-Key and body replays the first response, secret included, without a second subscription", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const body = { target_url: "http://127.0.0.1:9/x", events: ["contact.created"] };
    const first = await create(body, { "idempotency-key": "sub-1" });
    const again = await create(body, { "idempotency-key": "sub-1" });
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expect((await h.json("GET", "/public/v1/webhook-subscriptions")).body.meta.total).toBe(1);
    const other = await create({ ...body, events: ["contact.updated"] }, { "idempotency-key": "sub-1" });
    expectProblem(other, 422, "idempotency-key-reused");
  });

  test("null for description or max_rate is as if left out, as on PATCH and the other creates", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const body = { target_url: "http://127.0.0.1:9/x", events: ["contact.created"] };
    const leftOut = (await create(body)).body.data;
    const res = await create({ ...body, description: null, max_rate: null });
    expect(res.status).toBe(201);
    const data = res.body.data;
    expect(data).toEqual({ ...leftOut, id: expect.stringMatching(SUB_ID), secret: expect.stringMatching(SECRET), created_at: expect.stringMatching(ISO), updated_at: data.created_at });
    expect([data.description, data.max_rate]).toEqual([null, null]);
    expect((await h.json("GET", `/public/v1/webhook-subscriptions/${data.id}`)).body).toEqual({ data: { ...data, secret: `${data.secret.slice(0, 10)}…` } });
  });
});

describe("webhook subscriptions: a lost secrets key's reset", () => {
  /** resetNoting runs secrets-key reset's work with `box` (its deliveries failed after, as the command fails them) on the harness's database, and the tables its statements read or change, in order. */
  async function resetNoting(box: SecretBox) {
    const tables: string[] = [];
    const noting = (tx: Db): Db =>
      new Proxy(tx, {
        get: (target, key) => {
          const value = Reflect.get(target, key, target);
          if (typeof value !== "function") return value;
          return (sql: string, ...rest: unknown[]) => {
            tables.push(/(?:FROM|UPDATE|INTO) (\w+)/.exec(sql)![1]!);
            return value.call(target, sql, ...rest);
          };
        },
      });
    const outcome = await resetSecretsKey({ write: (work) => h.rt.db.write((tx) => work(noting(tx))) } as Pick<Database, "write"> as Database, box);
    if (typeof outcome !== "string") await failResetDeliveries(h.rt.db, outcome, h.rt.batchRows);
    return { outcome, tables };
  }

  test("it reads the key's check value, and a sealed secret, once each; every subscription is kept with a new secret sealed with the new key, disabled saying why, its pending deliveries failed as a disable fails them, which recover sends again once it is enabled", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const described = (await create({ target_url: "http://127.0.0.1:9/described", events: ["contact.created", "contact.updated"], description: "Partner A", max_rate: 5 })).body.data.id;
    const paused = (await create({ target_url: "http://127.0.0.1:9/paused", events: ["contact.created"] })).body.data.id;
    const gone = (await create({ target_url: "http://127.0.0.1:9/gone", events: ["account.created"] })).body.data.id;
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${described}/rotate-secret`, { body: {} })).status).toBe(200);
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${paused}/pause`)).status).toBe(200);
    await h.rt.db.write((tx) => disableSubscription(tx, gone, "the receiver answered 410 Gone to delivery del_X", Date.now(), null));
    expect((await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada" } })).status).toBe(201);
    // No delivery loop runs here: both deliveries stay pending until the reset.
    const pending = (await h.json("GET", "/public/v1/webhook-deliveries")).body.data;
    expect(pending.map((d: { status: string }) => d.status)).toEqual(["pending", "pending"]);
    const before = (await h.json("GET", "/public/v1/webhook-subscriptions")).body.data;

    expect(await resetNoting(h.rt.secrets)).toEqual({ outcome: "own-key", tables: ["secrets_key_check"] });
    const box = new SecretBox(new Uint8Array(32).fill(9));
    expect((await resetNoting(box)).outcome).toEqual([
      { id: described, target_url: "http://127.0.0.1:9/described", events: ["contact.created", "contact.updated"], description: "Partner A", status: "active", pending: 1 },
      { id: paused, target_url: "http://127.0.0.1:9/paused", events: ["contact.created"], description: null, status: "paused", pending: 1 },
      { id: gone, target_url: "http://127.0.0.1:9/gone", events: ["account.created"], description: null, status: "disabled", pending: 0 },
    ]);
    const after = (await h.json("GET", "/public/v1/webhook-subscriptions")).body.data;
    const reasons: Record<string, string> = { [described]: LOST_SECRET_REASON, [paused]: LOST_SECRET_REASON, [gone]: `${LOST_SECRET_REASON}; disabled before that: the receiver answered 410 Gone to delivery del_X` };
    expect(after).toEqual(
      before.map((s: { id: string; paused_at: string | null }) => ({
        ...s,
        status: "disabled",
        disabled_at: expect.stringMatching(ISO),
        disabled_reason: reasons[s.id],
        // The command's, the gone one's disable before it (which had recorded none) included.
        disabled_by: "command_line",
        secret: expect.stringMatching(MASKED),
        previous_secret_expires_at: null,
        updated_at: expect.stringMatching(ISO),
      })),
    );
    // The new secrets open with the new key alone; the rotation's previous secret, sealed with the lost key, is gone.
    const rows = await h.rt.db.all<{ id: string; secret: string; previous_secret: string | null }>("SELECT id, secret, previous_secret FROM webhook_subscriptions ORDER BY id");
    expect(rows.map((row) => [row.id, box.open(row.id, row.secret), row.previous_secret])).toEqual([described, paused, gone].map((id) => [id, expect.stringMatching(SECRET), null]));
    expect(() => h.rt.secrets.open(described, rows[0]!.secret)).toThrow("does not open with this secrets key");
    const failed = (await h.json("GET", "/public/v1/webhook-deliveries")).body.data;
    expect(failed.map((d: { id: string; status: string; last_error: string }) => [d.id, d.status, d.last_error])).toEqual(
      pending.map((d: { id: string }) => [d.id, "failed", "not sent: the subscription was disabled when its signing secret was lost with the secrets key"]),
    );
    // Enabled again once its secret is rotated (not before: secret-rotation-required), a subscription's failed deliveries are recovered under their ids.
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${described}/enable`)).body.type).toBe("urn:crm:problem:secret-rotation-required");
    // Rotated by the service restarted with the new key: one left on the lost key refuses to seal with it.
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${described}/rotate-secret`, { body: {} })).body.type).toBe("urn:crm:problem:secrets-key-replaced");
    expect((await rotateSecret({ ...h.rt, secrets: box }, described, {}, null, null)).status).toBe(200);
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${described}/enable`)).status).toBe(200);
    const since = new Date(Date.now() - 3_600_000).toISOString();
    expect((await h.json("POST", `/public/v1/webhook-subscriptions/${described}/recover`, { body: { since } })).body.data.queued).toBe(1);
    const recovered = pending.find((d: { subscription_id: string }) => d.subscription_id === described);
    expect((await h.json("GET", `/public/v1/webhook-deliveries/${recovered.id}`)).body.data.status).toBe("pending");
    // The database now records the new key: a second reset with it finds nothing lost.
    expect(await resetNoting(box)).toEqual({ outcome: "own-key", tables: ["secrets_key_check"] });
  });
});

describe("webhook subscriptions: errors", () => {
  const invalid = [
    ["a relative URL", { target_url: "/hooks", events: ["contact.created"] }, { pointer: "/target_url", detail: "must be an absolute http or https URL" }],
    ["another scheme", { target_url: "ftp://example.com/x", events: ["contact.created"] }, { pointer: "/target_url", detail: "must use http or https" }],
    ["a scheme without slashes", { target_url: "http:8.8.8.8/x", events: ["contact.created"] }, { pointer: "/target_url", detail: "must be written scheme://host/... (two slashes, then the host)" }],
    ["a scheme with one slash", { target_url: "https:/example.com/x", events: ["contact.created"] }, { pointer: "/target_url", detail: "must be written scheme://host/... (two slashes, then the host)" }],
    ["a scheme with three slashes", { target_url: "HTTP:///8.8.8.8/x", events: ["contact.created"] }, { pointer: "/target_url", detail: "must be written scheme://host/... (two slashes, then the host)" }],
    ["credentials in the URL", { target_url: "https://user:pw@example.com/x", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not contain credentials (user:password@); authenticate requests by their signature" }],
    ["empty credentials in the URL", { target_url: "http://:@8.8.8.8/", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not contain credentials (user:password@); authenticate requests by their signature" }],
    ["an empty userinfo (a bare @) in the URL", { target_url: "http://@8.8.8.8/", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not contain credentials (user:password@); authenticate requests by their signature" }],
    ["port 0", { target_url: "http://8.8.8.8:0/", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not use port 0, which no receiver can listen on; give the receiver's port or none" }],
    ["port 0 of an IPv6 address", { target_url: "http://[2606:4700:4700::1111]:0/", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not use port 0, which no receiver can listen on; give the receiver's port or none" }],
    ["a backslash in the URL", { target_url: "http://8.8.8.8\\@127.0.0.1/", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not contain a backslash, control character or whitespace (U+005C at character 15); percent-encode it in the path or query" }],
    ["a control character in the path", { target_url: "http://8.8.8.8/\u0001x", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not contain a backslash, control character or whitespace (U+0001 at character 16); percent-encode it in the path or query" }],
    ["a tab in the host", { target_url: "http://8.8.\t8.8/", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not contain a backslash, control character or whitespace (U+0009 at character 12); percent-encode it in the path or query" }],
    ["a space in the path", { target_url: "http://8.8.8.8/a b", events: ["contact.created"] }, { pointer: "/target_url", detail: "must not contain a backslash, control character or whitespace (U+0020 at character 17); percent-encode it in the path or query" }],
    ["a URL over 2048 characters", { target_url: `https://example.com/${"a".repeat(2030)}`, events: ["contact.created"] }, { pointer: "/target_url", detail: "must be an absolute http or https URL of at most 2048 characters" }],
    ["no events", { target_url: "https://example.com/x", events: [] }, { pointer: "/events", detail: `must be a non-empty list of distinct event kinds from: ${KINDS}` }],
    ["an unknown event kind", { target_url: "https://example.com/x", events: ["contact.created", "contact.merged"] }, { pointer: "/events/1", detail: `must be one of: ${KINDS}` }],
    ["a repeated event kind (named at the repeat, as a repeated tag is)", { target_url: "https://example.com/x", events: ["contact.created", "webhook.ping", "contact.created"] }, { pointer: "/events/2", detail: "repeats item 0" }],
    ["events not a list", { target_url: "https://example.com/x", events: "contact.created" }, { pointer: "/events", detail: `must be a non-empty list of distinct event kinds from: ${KINDS}` }],
    ["a missing target_url", { events: ["contact.created"] }, { pointer: "/target_url", detail: "must be an absolute http or https URL of at most 2048 characters" }],
    ["a description over 500 characters", { target_url: "https://example.com/x", description: "d".repeat(501), events: ["contact.created"] }, { pointer: "/description", detail: "must be a string of at most 500 characters" }],
  ] as const;

  for (const [what, body, error] of invalid) {
    test(`${what} is 422 naming the field, and nothing is stored`, async () => {
      h = await createHarness({ allowPrivateTargets: true });
      const res = await create(body, { "idempotency-key": "k" });
      expectProblem(res, 422, "validation");
      expect(res.body).toEqual(validation([error]));
      expect((await h.json("GET", "/public/v1/webhook-subscriptions")).body.meta.total).toBe(0);
    });
  }

  test("unknown event kinds are named at their index and a repeat at the repeat, unless the repeat is unknown too; a list too long is named as one", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const mixed = await create({ target_url: "https://example.com/x", events: ["contact.merged", "contact.created", "contact.created", "contact.merged"] });
    const tooLong = await create({ target_url: "https://example.com/x", events: [...KINDS.split(", "), "contact.created"] });
    expect([mixed.body, tooLong.body]).toEqual([
      validation([
        { pointer: "/events/0", detail: `must be one of: ${KINDS}` },
        { pointer: "/events/3", detail: `must be one of: ${KINDS}` },
        { pointer: "/events/2", detail: "repeats item 1" },
      ]),
      validation([{ pointer: "/events", detail: `must be a non-empty list of distinct event kinds from: ${KINDS}` }]),
    ]);
  });

  test("unknown subscription ids are 404 for get, delete and test", async () => {
    h = await createHarness();
    for (const [method, path] of [["GET", ""], ["DELETE", ""], ["POST", "/test"]] as const) {
      const res = await h.json(method, `/public/v1/webhook-subscriptions/sub_nope${path}`);
      expectProblem(res, 404, "not-found");
      expect(res.body.detail).toBe('No webhook subscription with id "sub_nope" exists.');
    }
  });

  test("bad list parameters are 422", async () => {
    h = await createHarness();
    const res = await h.json("GET", "/public/v1/webhook-subscriptions?event=contact.merged&per_page=0");
    expectProblem(res, 422, "validation");
    expect(res.body.errors).toContainEqual({ parameter: "event", detail: `must be one of: ${KINDS}` });
    expect(res.body.errors).toContainEqual({ parameter: "per_page", detail: "must be a whole number from 1 to 100" });
    expectProblem(await h.json("GET", "/public/v1/webhook-subscriptions?colour=red"), 422, "validation");
  });

  test("a body that is not JSON is refused", async () => {
    h = await createHarness();
    expectProblem(await h.json("POST", "/public/v1/webhook-subscriptions", { body: "target_url=x", headers: { "content-type": "application/x-www-form-urlencoded" } }), 415);
    expectProblem(await h.json("POST", "/public/v1/webhook-subscriptions", { body: "{" }), 400, "invalid-json");
  });
});

describe("webhook subscriptions: security", () => {
  const refused = [
    ["http://127.0.0.1/x", "address 127.0.0.1 is loopback"],
    ["http://10.0.0.1/x", "address 10.0.0.1 is private"],
    ["http://192.168.1.20:8080/x", "address 192.168.1.20 is private"],
    ["http://169.254.169.254/latest/meta-data", "address 169.254.169.254 is link-local (cloud metadata)"],
    ["http://[::1]:3000/x", "address ::1 is loopback"],
    ["http://[::ffff:127.0.0.1]/x", "address ::ffff:7f00:1 is IPv4-mapped IPv6"],
    ["http://[fd00:ec2::254]/x", "address fd00:ec2::254 is private (unique local)"],
    ["http://0.0.0.0:3000/x", "address 0.0.0.0 is unspecified"],
    ["http://2130706433/x", "address 127.0.0.1 is loopback"],
    ["http://0x7f.0.0.1/x", "address 127.0.0.1 is loopback"],
    ["http://0177.0.0.1/x", "address 127.0.0.1 is loopback"],
    ["http://127.1/x", "address 127.0.0.1 is loopback"],
    ["http://0x7f000001/x", "address 127.0.0.1 is loopback"],
    ["http://100.100.100.200/x", "address 100.100.100.200 is shared (carrier-grade NAT, cloud metadata)"],
    ["http://[::127.0.0.1]/x", "address ::7f00:1 is reserved"],
    ["http://[64:ff9b::7f00:1]/x", "address 64:ff9b::7f00:1 is loopback"],
    ["http://[2002:7f00:1::]/x", "address 2002:7f00:1:: is loopback"],
    ["http://[fe80::1]/x", "address fe80::1 is link-local"],
    ["http://[3fff::1]/x", "address 3fff::1 is documentation"],
    ["http://[2001:2::1]/x", "address 2001:2::1 is reserved (benchmarking)"],
    ["http://[2001:10::1]/x", "address 2001:10::1 is reserved (ORCHID)"],
    ["http://[2001:20::1]/x", "address 2001:20::1 is reserved (ORCHIDv2)"],
    ["http://[5f00::1]/x", "address 5f00::1 is reserved (segment routing)"],
    ["http://[100:0:0:1::1]/x", "address 100:0:0:1::1 is reserved (dummy prefix)"],
  ] as const;

  for (const [url, reason] of refused) {
    test(`${url} is refused with 422 without the private-targets switch`, async () => {
      h = await createHarness();
      const res = await create({ target_url: url, events: ["contact.created"] });
      expect(res.body).toEqual(
        validation([{ pointer: "/target_url", detail: `${reason}; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists` }], "The target URL is not allowed."),
      );
    });
  }

  test("a name that resolves to loopback (localhost) is refused", async () => {
    h = await createHarness();
    const res = await create({ target_url: "http://localhost:8080/x", events: ["contact.created"] });
    expectProblem(res, 422, "validation");
    expect(res.body.errors[0].pointer).toBe("/target_url");
    expect(res.body.errors[0].detail).toBe("host localhost resolves to a loopback address; webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists");
  });

  test("a name that resolves to non-public addresses is refused naming their kind, not the address, which the log gives the operator with the request id", async () => {
    const names: Record<string, string[]> = { "db-primary.corp.internal": ["10.20.30.40"], "vault.corp.internal": ["93.184.216.34", "fd12:3456::9"], "meta.corp.internal": ["169.254.169.254"] };
    const logs: any[] = [];
    h = await createHarness({}, { network: { resolve: async (name) => names[name]! }, log: createLogger("warn", (line) => logs.push(JSON.parse(line))) });
    const hint = "webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists";
    const answers: [number, string, string | null][] = [];
    for (const name of Object.keys(names)) {
      const res = await create({ target_url: `https://${name}/x`, events: ["contact.created"] }, { "x-request-id": `req-${name}` });
      answers.push([res.status, res.body.errors[0].detail, res.headers.get("x-request-id")]);
    }
    expect(answers).toEqual([
      [422, `host db-primary.corp.internal resolves to a private address; ${hint}`, "req-db-primary.corp.internal"],
      [422, `host vault.corp.internal resolves to a private (unique local) address; ${hint}`, "req-vault.corp.internal"],
      [422, `host meta.corp.internal resolves to a link-local (cloud metadata) address; ${hint}`, "req-meta.corp.internal"],
    ]);
    const refusals = logs.filter((line) => line.msg.startsWith("webhook target refused"));
    expect(refusals.map(({ time, ...line }) => line)).toEqual(
      Object.entries(names).map(([name, addresses]) => ({
        level: "warn",
        msg: "webhook target refused: its name resolves to a non-public address",
        request_id: `req-${name}`,
        target_host: name,
        address: addresses.at(-1),
      })),
    );
  });

  test("a name that does not resolve is refused", async () => {
    h = await createHarness();
    const res = await create({ target_url: "http://no-such-host.invalid/x", events: ["contact.created"] });
    expectProblem(res, 422, "validation");
    expect(res.body.errors[0].detail).toStartWith("host no-such-host.invalid could not be resolved");
  });

  test("with the switch, loopback targets are accepted", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    expect((await create({ target_url: "http://localhost:8080/x", events: ["contact.created"] })).status).toBe(201);
  });

  test("with the switch listing networks, targets in them are accepted and every other non-public one refused: loopback, cloud metadata and 0.0.0.0 stay closed", async () => {
    const names: Record<string, string[]> = { "crm-hooks.corp.internal": ["10.20.0.9", "fd12:3456::9"], "mixed.corp.internal": ["10.20.0.9", "127.0.0.1"] };
    h = await createHarness({ allowPrivateTargets: ["10.20.0.0/16", "fd12::/16"] }, { network: { resolve: async (name) => names[name] ?? ["93.184.216.34"] } });
    const hint = "webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists";
    const answers: [string, number, string | null][] = [];
    for (const url of [
      "http://10.20.0.7/hooks",
      "http://[fd12:3456::7]/hooks",
      "https://crm-hooks.corp.internal/hooks",
      "https://hooks.example.com/x",
      "http://10.30.0.7/hooks",
      "http://169.254.169.254/latest/api/token",
      "http://[fd00:ec2::254]/latest/meta-data/",
      "http://0.0.0.0:5432/",
      "http://127.0.0.1:8080/admin",
      "https://mixed.corp.internal/hooks",
    ]) {
      const res = await create({ target_url: url, events: ["contact.created"] });
      answers.push([url, res.status, res.body.errors?.[0]?.detail ?? null]);
    }
    expect(answers).toEqual([
      ["http://10.20.0.7/hooks", 201, null],
      ["http://[fd12:3456::7]/hooks", 201, null],
      ["https://crm-hooks.corp.internal/hooks", 201, null],
      ["https://hooks.example.com/x", 201, null],
      ["http://10.30.0.7/hooks", 422, `address 10.30.0.7 is private; ${hint}`],
      ["http://169.254.169.254/latest/api/token", 422, `address 169.254.169.254 is link-local (cloud metadata); ${hint}`],
      ["http://[fd00:ec2::254]/latest/meta-data/", 422, `address fd00:ec2::254 is private (unique local); ${hint}`],
      ["http://0.0.0.0:5432/", 422, `address 0.0.0.0 is unspecified; ${hint}`],
      ["http://127.0.0.1:8080/admin", 422, `address 127.0.0.1 is loopback; ${hint}`],
      ["https://mixed.corp.internal/hooks", 422, `host mixed.corp.internal resolves to a loopback address; ${hint}`],
    ]);
  });

  test("a network the switch lists admits only addresses of its own family: 0.0.0.0/8 admits neither ::1 nor an IPv4-mapped address, fd00::/8 no IPv4 address whose top bits are the same (s37 mutation audit)", async () => {
    h = await createHarness({ allowPrivateTargets: ["0.0.0.0/8", "fd00::/8"] });
    const hint = "webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists";
    const answers: [string, number, string | null][] = [];
    for (const url of ["http://[::1]:8080/hooks", "http://[::ffff:127.0.0.1]:8080/hooks", "http://253.0.0.7/hooks"]) {
      const res = await create({ target_url: url, events: ["contact.created"] });
      answers.push([url, res.status, res.body.errors?.[0]?.detail ?? null]);
    }
    expect(answers).toEqual([
      ["http://[::1]:8080/hooks", 422, `address ::1 is loopback; ${hint}`],
      ["http://[::ffff:127.0.0.1]:8080/hooks", 422, `address ::ffff:7f00:1 is IPv4-mapped IPv6; ${hint}`],
      ["http://253.0.0.7/hooks", 422, `address 253.0.0.7 is reserved; ${hint}`],
    ]);
  });

  test("every route needs a token", async () => {
    h = await createHarness();
    for (const [method, path] of [["POST", ""], ["GET", ""], ["GET", "/sub_x"], ["DELETE", "/sub_x"], ["POST", "/sub_x/test"]] as const) {
      const body = method === "POST" && path === "" ? { target_url: "https://example.com/x", events: ["contact.created"] } : undefined;
      const res = await h.json(method, `/public/v1/webhook-subscriptions${path}`, { body, headers: { authorization: "" } });
      expectProblem(res, 401, "unauthorized");
      expect(res.headers.get("www-authenticate")).toStartWith("Bearer");
    }
  });

  test("browser calls are refused", async () => {
    h = await createHarness({ allowPrivateTargets: true });
    const res = await create({ target_url: "http://127.0.0.1:9/x", events: ["contact.created"] }, { origin: "https://evil.example" });
    expectProblem(res, 403, "browser-request");
    expect((await h.json("GET", "/public/v1/webhook-subscriptions")).body.meta.total).toBe(0);
  });
});
