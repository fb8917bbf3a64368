import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApp, createRuntime, type App } from "../../server/app.ts";
import { copyFileSync, existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { databasePath, openDatabase, type SqliteDatabase } from "../../server/db/database.ts";
import { ReadLane } from "../../server/db/read-lane.ts";
import { SlowReads } from "../../server/db/slow-reads.ts";
import type { Db } from "../../server/db/sql.ts";
import { createLogger } from "../../server/shared/log.ts";
import { createHarness, type Harness } from "../support/harness.ts";

// SQLite's slow-list lane (--slow-list-lane): lists whose count reads many contacts run on a thread
// of their own. Every answer must be the one the main thread gives.

let h: Harness;
/** laned serves the same data directory as h, with the lane; h runs every list on its main thread. */
let laned: { db: SqliteDatabase; app: App };
const ids: Record<string, string> = {};

beforeAll(async () => {
  h = await createHarness({ slowListLane: 0, rateReadBurst: 10_000 });
  for (const name of ["north", "south"]) ids[name] = (await h.json("POST", "/public/v1/accounts", { body: { name } })).body.data.id;
  for (const name of ["ann", "bob"]) ids[name] = (await h.json("POST", "/public/v1/users", { body: { name, email: `${name}@example.com` } })).body.data.id;
  for (let i = 0; i < 40; i++) {
    const body = {
      first_name: ["Ada", "Grace", "Alan", null][i % 4],
      last_name: `Person${i}`,
      email: `p${i}@example.com`,
      tags: [...(i % 2 === 0 ? ["customer"] : []), ...(i % 3 === 0 ? ["vip"] : []), `region-${i % 4}`],
      account_ids: [...(i % 2 === 0 ? [ids.north!] : []), ...(i % 5 === 0 ? [ids.south!] : [])],
      assigned_user_id: i % 3 === 1 ? ids.ann! : ids.bob!,
    };
    expect((await h.json("POST", "/public/v1/contacts", { body })).status).toBe(201);
    if (i % 10 === 9) await Bun.sleep(3);
    if (i === 20) ids.middle = new Date().toISOString();
  }
  for (let i = 0; i < 5; i++) await h.json("PATCH", `/public/v1/contacts/${(await h.json("GET", `/public/v1/contacts?email=p${i * 7}@example.com`)).body.data[0].id}`, { body: { phone: `+1 555 0${i}` } });
  const db = openDatabase(databasePath(h.dataDir), "normal");
  const rt = await createRuntime({ db, config: { ...h.rt.config, slowListLane: 4 }, log: createLogger("error") });
  laned = { db, app: createApp(rt) };
});
afterAll(async () => {
  await laned?.db.close();
  await h?.close();
});

/** answer reads a request's status, body and headers, but for those that differ between any two requests. */
async function answer(app: App, path: string) {
  const res = await app.handle(new Request(`http://localhost${path}`, { headers: { authorization: `Bearer ${h.token}` } }));
  const headers = Object.fromEntries([...res.headers].filter(([name]) => !["x-request-id", "date", "ratelimit"].includes(name)));
  return { status: res.status, headers, body: await res.json() };
}

describe("slow lists on the lane", () => {
  test("answer exactly as on the main thread: pages, totals, cursors, includes, errors", async () => {
    const shapes = [
      "tag=customer&tag=vip",
      `tag=customer&account_id=${ids.north}`,
      `tag=customer&assigned_user_id=${ids.bob}`,
      `account_id=${ids.north}&assigned_user_id=${ids.ann}&per_page=3&page=2`,
      `tag=vip&account_id=${ids.south}&assigned_user_id=${ids.bob}&sort_by=first_name&sort_direction=asc`,
      `tag=customer&created_after=${ids.middle}`,
      `created_after=2020-01-01T00:00:00Z&updated_after=${ids.middle}`,
      "updated_after=2020-01-01T00:00:00Z&sort_by=created_at&sort_direction=asc&per_page=7",
      "full_name=grace&per_page=4",
      "full_name=ad",
      `tag=customer&account_id=${ids.north}&include=accounts,assigned_user`,
      "tag=customer&tag=nobody",
      "tag=customer&tag=vip&per_page=2&page=99",
      "tag=customer&tag=vip&cursor=not-a-cursor",
      "tag=customer&tag=vip&sort_by=nothing",
    ];
    for (const query of shapes) {
      const path = `/public/v1/contacts?${query}`;
      const main = await answer(h.app, path);
      expect({ path, ...(await answer(laned.app, path)) }).toEqual({ path, ...main });
      // and the pages that follow, by cursor
      let cursor = main.body.meta?.next_cursor;
      for (let pages = 0; cursor && pages < 3; pages++) {
        const next = `${path}&cursor=${encodeURIComponent(cursor)}`;
        const followed = await answer(h.app, next);
        expect({ next, ...(await answer(laned.app, next)) }).toEqual({ next, ...followed });
        cursor = followed.body.meta.next_cursor;
      }
    }
  });

  test("a contact whose create was answered is in the next slow list, and counted", async () => {
    const request = (method: string, path: string, body?: unknown) =>
      laned.app.handle(new Request(`http://localhost${path}`, { method, headers: { authorization: `Bearer ${h.token}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }));
    const created: string[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await request("POST", "/public/v1/contacts", { email: `fresh${i}@example.com`, tags: ["fresh", "new"] });
      created.unshift(((await res.json()) as { data: { id: string } }).data.id);
      const list = (await (await request("GET", "/public/v1/contacts?tag=fresh&tag=new&per_page=100")).json()) as { data: { id: string }[]; meta: { total: number } };
      expect({ ids: list.data.map((c) => c.id), total: list.meta.total }).toEqual({ ids: created, total: created.length });
    }
  });

  test("closing the database lets the slow read under way finish, then ends the lane's thread", async () => {
    const own = await createHarness();
    let closed = false;
    try {
      const lane = () => (own.db as unknown as { lane: { worker: Worker | null } }).lane;
      const { promise: released, resolve: release } = Promise.withResolvers<void>();
      const held = own.db.readAside(async (db) => {
        const before = await db.get<{ n: number }>("SELECT count(*) AS n FROM contacts");
        await released;
        return before;
      }, "holder");
      const closing = own.db.close().then(() => (closed = true));
      // However long it is given, the close waits for the read.
      await Bun.sleep(20);
      expect({ closed, thread: lane().worker !== null }).toEqual({ closed: false, thread: true });
      release();
      expect(await held).toEqual({ n: 0 });
      await closing;
      expect(lane().worker).toBeNull();
    } finally {
      await own.close();
    }
  });

  test("a lane whose thread ends runs the read it held again on the main thread, and starts a new thread for the next", async () => {
    const path = `/public/v1/contacts?tag=customer&account_id=${ids.north}`;
    const expected = await answer(h.app, path);
    // The thread's end is forced from here: nothing else ends it.
    const thread = () => (laned.db as unknown as { lane: { worker: Worker | null } }).lane.worker;
    const contacts = await h.db.get<{ n: number }>("SELECT count(*) AS n FROM contacts");
    let ended = false;
    const count = await laned.db.readAside(async (db) => {
      const first = await db.get<{ n: number }>("SELECT count(*) AS n FROM contacts");
      if (!ended) {
        ended = true;
        thread()!.terminate();
      }
      return { first, second: await db.get<{ n: number }>("SELECT count(*) AS n FROM contacts") };
    }, "test");
    expect(count).toEqual({ first: contacts, second: contacts });
    expect(await answer(laned.app, path)).toEqual(expected);
    expect(thread()).not.toBeNull();
  });

  test("a read whose run throws at once fails alone and frees its place: the next read runs, and nothing is left held", async () => {
    let calls = 0;
    const throwing = new SlowReads(2, 1, (work) => {
      if (++calls === 1) throw new Error("could not start");
      return work(h.db);
    });
    const count = (db: Db) => db.get<{ n: number }>("SELECT count(*) AS n FROM contacts");
    const first = await throwing.read(count, "test").then(
      () => "answered",
      (error: Error) => error.message,
    );
    expect({ first, held: throwing.held }).toEqual({ first: "could not start", held: 0 });
    expect(await throwing.read(count, "test")).toEqual(await h.db.read(count));
    await throwing.idle();
    expect(throwing.held).toBe(0);
  });

  test("a thread whose path names another file than the service opened (a backup moved over it) does not open it: every read is answered on the main thread, and the file is not touched", async () => {
    const path = databasePath(h.dataDir);
    const other = join(h.dataDir, "restored.sqlite");
    copyFileSync(path, other);
    const before = readFileSync(other);
    const warnings: string[] = [];
    const log = createLogger("warn", (line) => warnings.push(JSON.parse(line).msg));
    let onMainThread = 0;
    const lane = new ReadLane(other, statSync(path, { bigint: true }), 2, (work) => (onMainThread++, h.db.read(work)), log);
    try {
      const read = (db: Db) => db.get<{ n: number }>("SELECT count(*) AS n FROM contacts");
      const expected = await h.db.read(read);
      expect([await lane.read(read, "test"), await lane.read(read, "test")]).toEqual([expected, expected]);
      expect({ onMainThread, warnings, wal: existsSync(`${other}-wal`), unchanged: readFileSync(other).equals(before) }).toEqual({
        onMainThread: 2,
        warnings: ["the slow-list lane's thread did not open the database: its path names another file than the service opened; slow lists run on the main thread until the service is restarted"],
        wal: false,
        unchanged: true,
      });
    } finally {
      await lane.close();
    }
  });
});
