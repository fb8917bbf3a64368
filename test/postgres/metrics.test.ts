import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { metricsText } from "../../server/ops/service.ts";
import { createLogger } from "../../server/shared/log.ts";
import { parseExposition } from "../ops/prometheus.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { createHarness, type Harness } from "../support/harness.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

// s33 observability audit: /metrics read its queue and history gauges with no deadline, so a lock
// on webhook_deliveries (VACUUM FULL, ALTER TABLE, LOCK TABLE) held every scrape for as long as it
// lasted (Prometheus lost every metric of every instance), and each scrape it abandoned kept a
// pooled connection waiting until the pool was full and the API stopped answering.

let database: TestDatabase;
let h: Harness;
const lines: Record<string, any>[] = [];
const keyDir = mkdtempSync(join(tmpdir(), "crm-metrics-"));

beforeAll(async () => {
  database = await createTestDatabase();
  const log = createLogger("warn", (line) => lines.push(JSON.parse(line)));
  h = await createHarness({ databaseUrl: database.url, databasePool: 3, secretsKeyFile: writeSecretsKeyFile(join(keyDir, "secrets.key")) }, { log });
}, 60_000);

afterAll(async () => {
  await h?.close();
  await database?.drop();
  rmSync(keyDir, { recursive: true, force: true });
});

/** HANG_GUARD_MS fails a scrape that waits for the lock, rather than the test's timeout: no timing is asserted. */
const HANG_GUARD_MS = 8000;

/** scrape reads /metrics' text as the route does, or says that none came before the hang guard. */
async function scrape(): Promise<{ database_up: number | undefined; queue_depth: number | undefined; up: number | undefined } | string> {
  const text = await Promise.race([metricsText(h.rt), Bun.sleep(HANG_GUARD_MS).then(() => null)]);
  if (text === null) return `no answer within ${HANG_GUARD_MS / 1000} s`;
  const scraped = parseExposition(text);
  return { database_up: scraped.value("crm_database_up"), queue_depth: scraped.value("crm_webhook_queue_depth"), up: scraped.value("crm_up") };
}

describe("metrics on PostgreSQL: a lock on the delivery history", () => {
  test("leaves the database gauges out of the scrapes meanwhile (crm_database_up 0, one warn line), which answer with the rest and hold one connection between them, so API reads go on; once it is released the gauges are back", async () => {
    expect(await scrape()).toEqual({ database_up: 1, queue_depth: 0, up: 1 });
    const holder = new SQL({ url: database.url, max: 1 });
    const admin = new SQL({ url: database.url, max: 1 });
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const held = holder.begin(async (tx) => {
      await tx.unsafe("LOCK TABLE webhook_deliveries IN ACCESS EXCLUSIVE MODE");
      locked();
      await released;
    });
    try {
      await isLocked;
      // More scrapes at once than the pool has connections; the service's sessions waiting for the lock are counted while they run.
      let answered = false;
      const scrapes = Promise.all(Array.from({ length: 6 }, () => scrape())).finally(() => (answered = true));
      let mostWaiting = 0;
      while (!answered) {
        const [{ n }] = await admin`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = ${database.name} AND application_name = 'crm' AND wait_event_type = 'Lock'`;
        mostWaiting = Math.max(mostWaiting, n);
      }
      expect({ scrapes: await scrapes, atMostOneWaiting: mostWaiting <= 1 }).toEqual({ scrapes: Array(6).fill({ database_up: 0, queue_depth: undefined, up: 1 }), atMostOneWaiting: true });
      const reads = await Promise.all(Array.from({ length: 6 }, async () => (await h.request("GET", "/public/v1/contacts")).status));
      expect(reads).toEqual(Array(6).fill(200));
      expect(lines.filter((line) => line.msg.startsWith("/metrics")).map(({ level, msg }) => ({ level, msg }))).toEqual([
        {
          level: "warn",
          msg: "/metrics: the gauges read from the database were left out of the scrape (crm_database_up 0): they were not read within 2 s, or the database refused them",
        },
      ]);
    } finally {
      release();
      await held;
      await holder.close();
      await admin.close();
    }
    expect(await scrape()).toEqual({ database_up: 1, queue_depth: 0, up: 1 });
  }, 60_000);
});
