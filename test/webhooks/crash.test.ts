import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../../server/auth/service.ts";
import { databasePath, openDatabase } from "../../server/db/database.ts";
import { migrate } from "../../server/db/migrations.ts";
import { MAX_PER_SUBSCRIPTION } from "../../server/webhooks/worker.ts";
import { api, SOURCE, spawnServer } from "../ops/support.ts";
import { startReceiver, waitFor } from "./support.ts";

const dataDir = mkdtempSync(join(tmpdir(), "crm-crash-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** serve starts `bun server/main.ts serve` as a child process on the data directory. */
const serve = () =>
  spawnServer([...SOURCE, "serve", "--port", "0", "--log-level", "error"], {
    env: {
      ...(process.env as Record<string, string>),
      CRM_DATA_DIR: dataDir,
      CRM_ALLOW_PRIVATE_TARGETS: "1",
      CRM_RETRY_SCHEDULE: "0.05,0.05,0.05",
      CRM_DELIVERY_TIMEOUT_MS: "1000",
      CRM_RATE_WRITE_BURST: "1000",
      CRM_RATE_READ_PER_SECOND: "1000",
    },
  });

describe("crash safety", () => {
  test("after SIGKILL with deliveries pending and in flight, a restart delivers every event at least once", async () => {
    const db = openDatabase(databasePath(dataDir));
    migrate(db.sqlite);
    const { token } = await createApiToken(db, "crash-test");
    await db.close();
    const call = (method: string, path: string, body?: unknown) => api(server.url, token, method, path, body);

    const receiver = startReceiver();
    receiver.hold();
    let server = await serve();
    try {
      const sub = await call("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created", "contact.deleted"] });
      expect(sub.status).toBe(201);
      const created = await Promise.all(Array.from({ length: MAX_PER_SUBSCRIPTION * 3 }, (_, i) => call("POST", "/public/v1/contacts", { first_name: `c${i}` })));
      const ids: string[] = created.map((res) => res.body.data.id);
      expect(new Set(ids).size).toBe(MAX_PER_SUBSCRIPTION * 3);
      const deleted = await call("DELETE", `/public/v1/contacts/${ids[0]}`);
      expect(deleted.status).toBe(204);
      // The receiver holds every request: a full share is in flight, the rest pending.
      await waitFor(() => receiver.received.length >= MAX_PER_SUBSCRIPTION, "attempts in flight");

      server.proc.kill("SIGKILL");
      expect(await server.proc.exited).not.toBe(0);
      receiver.received.length = 0;
      receiver.release();

      server = await serve();
      const expected = [...ids.map((id) => `contact.created ${id}`), `contact.deleted ${ids[0]}`].sort();
      const seen = () => new Set(receiver.received.map((got) => `${got.json.type} ${got.json.data.id}`));
      await waitFor(() => seen().size === expected.length, "every event after the restart", 20_000);
      expect([...seen()].sort()).toEqual(expected);

      const total = async (query: string): Promise<number> => (await call("GET", `/public/v1/webhook-deliveries?${query}`)).body.meta.total;
      while ((await total("status=succeeded")) < expected.length) await Bun.sleep(10);
      expect(await total("")).toBe(expected.length);
    } finally {
      expect(await server.stopWith("SIGTERM")).toEqual({ exitCode: 0, killed: false });
      await receiver.stop();
    }
  }, 30_000);
});
