// bun bench/relation-windows.ts: pages of relation filters beside another filter (the walk's window
// of the rarest relation, each entry probed for the others) on SQLite, in-process through the store:
// page 1 and page 40 of 25, newest first, oldest first and by last_name, the time of the page alone
// (its count is read apart), min of BENCH_RUNS (7) runs, with the plans of the page's statements.
// BENCH_AGAINST=<another checkout> compares instead, in alternating rounds (bench/paired.ts).
// Data (BENCH_CONTACTS, default 100,000): tag `customer` on the even contacts, `region-N` on
// i % 20 = N; account BIG on 1 in 4; user BROAD assigned to the odd contacts, 100 others to the rest.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRuntime } from "../server/app.ts";
import { DEFAULT_CONFIG } from "../server/config.ts";
import { countContacts, listContactVersions, type ContactFilters } from "../server/contacts/store.ts";
import { databasePath, openDatabase } from "../server/db/database.ts";
import { createLogger } from "../server/shared/log.ts";
import { fastest, pagePlans, pairedRuns, storeAgainst } from "./paired.ts";
import { relationRowsOfCopies } from "./seed.ts";

const CONTACTS = Number(process.env.BENCH_CONTACTS ?? 100_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 7);
const PER_PAGE = 25;
const BIG = `acc_${"9".repeat(26)}`;
const BROAD = `usr_${"9".repeat(26)}`;
const against = await storeAgainst();

const dataDir = mkdtempSync(join(tmpdir(), "crm-bench-relation-windows-"));
const db = openDatabase(databasePath(dataDir), "normal");
await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir, logLevel: "error" }, log: createLogger("error") });

function seed() {
  const started = performance.now();
  const first = Date.now() - CONTACTS * 1000;
  // sqlite-only: the seed is bulk SQL on the writer connection (the tables' triggers run as for the API).
  const sqlite = db.sqlite;
  sqlite.transaction(() => {
    sqlite.run("INSERT INTO accounts (id, name, name_key, domain, properties, created_at, updated_at) VALUES (?, 'Big', 'big', NULL, '{}', ?, ?)", [BIG, first, first]);
    sqlite.run(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 99)
            INSERT INTO users (id, name, email, created_at, updated_at) SELECT 'usr_' || printf('%026d', i), 'User ' || i, 'user' || i || '@example.com', ?1, ?1 FROM n`, [first]);
    sqlite.run("INSERT INTO users (id, name, email, created_at, updated_at) VALUES (?, 'Broad', 'broad@example.com', ?, ?)", [BROAD, first, first]);
    sqlite.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
       INSERT INTO contacts (id, first_name, last_name, email, phone, assigned_user_id, properties, account_ids, assigned_user_ids, created_at, updated_at)
       SELECT 'con_' || printf('%026d', i), 'First' || (i % 5000), 'Last' || ((i * 7919) % 1000003), 'contact' || i || '@example.com', NULL,
              CASE WHEN i % 2 = 1 THEN ?3 ELSE 'usr_' || printf('%026d', i % 100) END,
              json_object('tags', json('[' || CASE WHEN i % 2 = 0 THEN '"customer",' ELSE '' END || '"region-' || (i % 20) || '"]')),
              CASE WHEN i % 4 = 0 THEN json_array(?2) ELSE '[]' END, '[]', ?4 + i * 1000, ?4 + i * 1000
       FROM n`,
      [CONTACTS, BIG, BROAD, first],
    );
    relationRowsOfCopies(sqlite);
  }).immediate();
  console.log(`seeded ${CONTACTS.toLocaleString("en-US")} contacts in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

const SCENARIOS: [string, ContactFilters][] = [
  ["account BIG (1 in 4) and tag customer (1 in 2)", { accountId: BIG, tags: ["customer"] }],
  ["tag region-4 (1 in 20) and tag customer (1 in 2)", { tags: ["region-4", "customer"] }],
  ["account BIG (1 in 4) and tag region-4 (1 in 20, all of them BIG's)", { accountId: BIG, tags: ["region-4"] }],
  ["user 4 (1 in 100) and account BIG (1 in 4)", { assignedUserId: `usr_${"4".padStart(26, "0")}`, accountId: BIG }],
  ["tag region-3 (1 in 20) and user BROAD (1 in 2)", { tags: ["region-3"], assignedUserId: BROAD }],
  ["user BROAD (1 in 2) and tag region-3 (1 in 20): the tag drives", { assignedUserId: BROAD, tags: ["region-3"] }],
];

const ORDERS = [
  ["newest first", { sortBy: "created_at", direction: "desc" }],
  ["oldest first", { sortBy: "created_at", direction: "asc" }],
  ["by last_name", { sortBy: "last_name", direction: "asc" }],
] as const;

const fastestOf = (work: () => Promise<unknown>) => fastest(work, RUNS);

try {
  seed();
  const ms = (n: number) => n.toFixed(2).padStart(6);
  for (const [name, filters] of SCENARIOS) {
    const matches = await countContacts(db, filters);
    console.log(`${name}: ${matches.toLocaleString("en-US")} matches${against ? `; the page, median of ${RUNS}, this checkout against ${process.env.BENCH_AGAINST}` : ""}`);
    for (const [orderName, order] of ORDERS) {
      for (const pageNumber of [1, 40]) {
        const page = { ...order, cursor: null, limit: PER_PAGE + 1, offset: (pageNumber - 1) * PER_PAGE, matches };
        const label = `  ${orderName}, page ${String(pageNumber).padStart(2)}:`;
        if (against) {
          const { ours, theirs, difference } = await pairedRuns(() => listContactVersions(db, filters, page), () => against.listContactVersions(db, filters, page), RUNS);
          console.log(`${label} ${ms(ours)} ms against ${ms(theirs)} ms, difference ${ms(difference)} ms`);
        } else {
          console.log(`${label} ${ms(await fastestOf(() => listContactVersions(db, filters, page)))} ms   ${await pagePlans(db, (spy) => listContactVersions(spy, filters, page))}`);
        }
      }
    }
  }
} finally {
  await db.close();
  rmSync(dataDir, { recursive: true, force: true });
}
