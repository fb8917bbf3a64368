import { describe, expect, test } from "bun:test";
import { createApiToken } from "../../server/auth/service.ts";
import type { Config } from "../../server/config.ts";
import { addOperator, ConsoleClient } from "../console/support.ts";
import { waitUntil } from "../ops/support.ts";
import { createHarness } from "../support/harness.ts";

// Slow lists (filters whose count reads many contacts) on either backend's read lane: held at most
// --slow-list-lane at once, readers in turns, the last place kept for a reader with none there.

/** ONE_AT_A_TIME runs one slow list at a time on both backends: SQLite's lane always does; PostgreSQL's runs on half its pool. */
const ONE_AT_A_TIME: Partial<Config> = { databasePool: 2 };

describe("slow lists take turns on the read lane", () => {
  test("a full lane refuses a slow list at once with 503 and Retry-After; other lists and later slow ones are answered", async () => {
    const single = await createHarness({ slowListLane: 1, ...ONE_AT_A_TIME });
    try {
      await single.json("POST", "/public/v1/contacts", { body: { email: "a@example.com", tags: ["a", "b"] } });
      // The lane's one place is held until released.
      const { promise: released, resolve: release } = Promise.withResolvers<void>();
      const holding = single.rt.db.readAside(() => released, "holder");
      const refused = await single.json("GET", "/public/v1/contacts?tag=a&tag=b");
      expect({ status: refused.status, retryAfter: refused.headers.get("retry-after"), contentType: refused.headers.get("content-type"), body: refused.body }).toEqual({
        status: 503,
        retryAfter: "1",
        contentType: "application/problem+json",
        body: {
          type: "urn:crm:problem:slow-lists-busy",
          title: "Service Unavailable",
          status: 503,
          detail: "The service is already running or holding 1 slow lists (filters whose count reads many contacts: several relations, time filters, a name search). Retry after the Retry-After seconds, one list at a time, or narrow the filters.",
        },
      });
      for (const cheap of ["", "?tag=a", "?email=a@example.com"]) expect((await single.json("GET", `/public/v1/contacts${cheap}`)).body.meta.total).toBe(1);
      release();
      await holding;
      expect((await single.json("GET", "/public/v1/contacts?tag=a&tag=b")).body.meta.total).toBe(1);
    } finally {
      await single.close();
    }
  });

  test("clients take turns: one with a list waiting behind another's five is answered after one of them, not after all; /metrics counts the lists held", async () => {
    const turns = await createHarness({ slowListLane: 8, metricsToken: "scrape", ...ONE_AT_A_TIME });
    const { promise: released, resolve: release } = Promise.withResolvers<void>();
    try {
      await turns.json("POST", "/public/v1/contacts", { body: { email: "a@example.com", tags: ["a", "b"] } });
      const other = (await createApiToken(turns.rt.db, "other")).token;
      const holding = turns.rt.db.readAside(() => released, "holder");
      const answered: string[] = [];
      const list = (client: string, token: string) =>
        turns.request("GET", "/public/v1/contacts?tag=a&tag=b", { headers: { authorization: `Bearer ${token}` } }).then(async (res) => {
          answered.push(`${client} ${res.status} ${(await res.json()).meta.total}`);
        });
      const busy = Array.from({ length: 5 }, () => list("busy", turns.token));
      await waitUntil(() => turns.rt.db.readsAside() === 6, "the busy client's lists to wait on the lane");
      const quiet = list("quiet", other);
      await waitUntil(() => turns.rt.db.readsAside() === 7, "the quiet client's list to wait on the lane");
      const metrics = await (await turns.request("GET", "/metrics", { headers: { authorization: "Bearer scrape" } })).text();
      // Seven lists and the scrape's own measure of the webhook history, which waits on the lane too.
      expect(metrics.split("\n").filter((line) => line.startsWith("crm_slow_lists_held"))).toEqual(["crm_slow_lists_held 8"]);
      release();
      await Promise.all([holding, ...busy, quiet]);
      expect(answered).toEqual(["busy 200 1", "quiet 200 1", "busy 200 1", "busy 200 1", "busy 200 1", "busy 200 1"]);
      expect(turns.rt.db.readsAside()).toBe(0);
    } finally {
      release(); // a failed expectation would otherwise leave the lane held, and close waits for it
      await turns.close();
    }
  });

  test("the lane keeps its last place for a client with no list there: one client cannot lock the others out", async () => {
    const kept = await createHarness({ slowListLane: 4, ...ONE_AT_A_TIME });
    const { promise: released, resolve: release } = Promise.withResolvers<void>();
    try {
      await kept.json("POST", "/public/v1/contacts", { body: { email: "a@example.com", tags: ["a", "b"] } });
      const [second, third] = [(await createApiToken(kept.rt.db, "second")).token, (await createApiToken(kept.rt.db, "third")).token];
      const holding = kept.rt.db.readAside(() => released, "holder");
      const list = (token: string) => kept.json("GET", "/public/v1/contacts?tag=a&tag=b", { headers: { authorization: `Bearer ${token}` } });
      const busy = Array.from({ length: 4 }, () => list(kept.token));
      await waitUntil(() => kept.rt.db.readsAside() === 3, "two of the busy client's lists to wait on the lane");
      const quiet = list(second);
      await waitUntil(() => kept.rt.db.readsAside() === 4, "the second client's list to take the last place");
      const refused = await list(third);
      release();
      const answers = await Promise.all(busy);
      const detail = (held: number, yours: number) => ({
        type: "urn:crm:problem:slow-lists-busy",
        title: "Service Unavailable",
        status: 503,
        detail:
          yours === 0
            ? `The service is already running or holding ${held} slow lists (filters whose count reads many contacts: several relations, time filters, a name search). Retry after the Retry-After seconds, one list at a time, or narrow the filters.`
            : `The service is running or holding ${held} slow lists, ${yours} of them yours, and keeps the last of its 4 places for a client with none there (filters whose count reads many contacts: several relations, time filters, a name search). Retry after the Retry-After seconds, one list at a time, or narrow the filters.`,
      });
      // which two of the four were admitted depends on the order they reached the lane, not on which was sent first
      const answered = answers.filter((res) => res.status === 200).map((res) => res.body.meta.total);
      const refusals = answers.filter((res) => res.status !== 200).map((res) => res.body);
      expect({ answered, refusals }).toEqual({ answered: [1, 1], refusals: [detail(3, 2), detail(3, 2)] });
      expect([(await quiet).body.meta.total, refused.body]).toEqual([1, detail(4, 0)]);
      await holding;
    } finally {
      release();
      await kept.close();
    }
  });

  test("the console's name search takes its turn on the lane: refused with 503 and Retry-After while the lane is full, an email search answered meanwhile", async () => {
    const single = await createHarness({ slowListLane: 1, ...ONE_AT_A_TIME });
    const { promise: released, resolve: release } = Promise.withResolvers<void>();
    try {
      const ada = (await single.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", last_name: "Lovelace", email: "ada@example.com" } })).body.data;
      await addOperator(single.rt.db);
      const client = new ConsoleClient((request) => single.app.handle(request));
      expect((await client.signIn()).status).toBe(303);
      const holding = single.rt.db.readAside(() => released, "holder");
      const refused = await client.get("/console/contacts?q=lovelace");
      expect({ status: refused.status, retryAfter: refused.headers.get("retry-after"), title: /<h1>([^<]*)<\/h1>/.exec(refused.text)?.[1] }).toEqual({ status: 503, retryAfter: "1", title: "Try again soon" });
      const byEmail = await client.get("/console/contacts?q=ada@example.com");
      expect({ status: byEmail.status, shown: byEmail.text.includes(`/console/contacts/${ada.id}`) }).toEqual({ status: 200, shown: true });
      release();
      await holding;
      const byName = await client.get("/console/contacts?q=lovelace");
      expect({ status: byName.status, shown: byName.text.includes(`/console/contacts/${ada.id}`) }).toEqual({ status: 200, shown: true });
    } finally {
      release();
      await single.close();
    }
  });

});
