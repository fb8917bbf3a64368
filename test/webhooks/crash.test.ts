import { afterAll, describe, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../../server/auth/service.ts";
import { databasePath, openDatabase } from "../../server/db/database.ts";
import { migrate } from "../../server/db/migrations.ts";
import { MAX_PER_SUBSCRIPTION } from "../../server/webhooks/worker.ts";
import { startReceiver, waitFor } from "./support.ts";

const dataDir = mkdtempSync(join(tmpdir(), "crm-crash-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** serve starts `bun server/main.ts serve` as a child process on the data directory and waits for its URL. */
async function serve(): Promise<{ child: Subprocess<"ignore", "pipe", "pipe">; url: string }> {
  const child = Bun.spawn(["node_modules/.bin/bun", "server/main.ts", "serve", "--port", "0", "--log-level", "error"], {
    env: { ...process.env, CRM_DATA_DIR: dataDir, CRM_ALLOW_PRIVATE_TARGETS: "1", CRM_RETRY_SCHEDULE: "0.05,0.05,0.05", CRM_DELIVERY_TIMEOUT_MS: "1000", CRM_RATE_WRITE_BURST: "1000", CRM_RATE_READ_PER_SECOND: "1000" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const reader = child.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`server exited: ${await new Response(child.stderr).text()}`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const url = /listening on (\S+)/.exec(text)?.[1];
  if (!url) throw new Error(`unexpected first line: ${text}`);
  return { child, url };
}

describe("crash safety", () => {
  test("after SIGKILL with deliveries pending and in flight, a restart delivers every event at least once", async () => {
    const db = openDatabase(databasePath(dataDir));
    migrate(db);
    const { token } = createApiToken(db, "crash-test");
    db.close();
    const api = (url: string, method: string, path: string, body?: unknown) =>
      fetch(`${url}${path}`, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });

    const receiver = startReceiver();
    receiver.hold();
    let server = await serve();
    try {
      const sub = await api(server.url, "POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, events: ["contact.created", "contact.deleted"] });
      expect(sub.status).toBe(201);
      const created = await Promise.all(Array.from({ length: MAX_PER_SUBSCRIPTION * 3 }, (_, i) => api(server.url, "POST", "/public/v1/contacts", { first_name: `c${i}` })));
      const ids = await Promise.all(created.map(async (res) => ((await res.json()) as { data: { id: string } }).data.id));
      expect(new Set(ids).size).toBe(MAX_PER_SUBSCRIPTION * 3);
      const deleted = await api(server.url, "DELETE", `/public/v1/contacts/${ids[0]}`);
      expect(deleted.status).toBe(204);
      // The receiver holds every request: a full share is in flight, the rest pending.
      await waitFor(() => receiver.received.length >= MAX_PER_SUBSCRIPTION, "attempts in flight");

      server.child.kill("SIGKILL");
      expect(await server.child.exited).not.toBe(0);
      receiver.received.length = 0;
      receiver.release();

      server = await serve();
      const expected = [...ids.map((id) => `contact.created ${id}`), `contact.deleted ${ids[0]}`].sort();
      const seen = () => new Set(receiver.received.map((got) => `${got.json.type} ${got.json.data.id}`));
      await waitFor(() => seen().size === expected.length, "every event after the restart", 20_000);
      expect([...seen()].sort()).toEqual(expected);

      const total = async (query: string) => ((await (await api(server.url, "GET", `/public/v1/webhook-deliveries?${query}`)).json()) as { meta: { total: number } }).meta.total;
      while ((await total("status=succeeded")) < expected.length) await Bun.sleep(10);
      expect(await total("")).toBe(expected.length);
    } finally {
      server.child.kill("SIGTERM");
      await server.child.exited;
      await receiver.stop();
    }
    expect(server.child.exitCode).toBe(0);
  }, 30_000);
});
