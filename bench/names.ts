// bun bench/names.ts: the contact list's full_name search on SQLite, in-process through the store:
// for needles matching 1 in 2, 1 in 6, 1 in 9, 1 in 50 and 1 in 1,000 of the contacts, spread evenly
// in time, 10 contacts, and 1 in 9 all among the oldest (the far end of a newest-first order), the
// count and the page of 25 (newest first and oldest first, page 1 and page 40), min of BENCH_RUNS
// runs each, with the plans of the page's statements. Two needles of 2 characters (too short for
// trigrams) match 1 in 9, spread and oldest. BENCH_CONTACTS (default 100,000), BENCH_RUNS (7).
// Names: first_name N<i>, last_name the words whose share the contact falls in (Alpha: i % 2 = 0,
// Bravo: i % 6, Charlie: i % 9, Delta: i % 50, Echo: i % 1000, Foxtrot: 10 spread contacts, Golf:
// the oldest ninth); "rl" is in Charlie only, "lf" in Golf only.
// BENCH_AGAINST=<another checkout> (say /work/main) compares instead: each page with its count is
// read through this checkout's store and that one's in alternating rounds (which goes first
// alternates too), and each side's median and the median of the pairs' differences are printed.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRuntime } from "../server/app.ts";
import { DEFAULT_CONFIG } from "../server/config.ts";
import { countContacts, indexWaitingNames, keyContactNames, listContactVersions } from "../server/contacts/store.ts";
import { databasePath, openDatabase } from "../server/db/database.ts";
import { createLogger } from "../server/shared/log.ts";
import { fastest, pagePlans, pairedRuns, storeAgainst, type Store } from "./paired.ts";

const CONTACTS = Number(process.env.BENCH_CONTACTS ?? 100_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 7);
const PER_PAGE = 25;
const against = await storeAgainst();

const dataDir = mkdtempSync(join(tmpdir(), "crm-bench-names-"));
const db = openDatabase(databasePath(dataDir), "normal");
await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir, logLevel: "error" }, log: createLogger("error") });

async function seed() {
  const started = performance.now();
  const first = Date.now() - CONTACTS * 1000;
  // sqlite-only: the seed is bulk SQL on the writer connection; the names reach the trigram index in one batch.
  db.sqlite.transaction(() => {
    db.sqlite.run(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
       INSERT INTO contacts (id, first_name, last_name, email, phone, properties, account_ids, assigned_user_ids, created_at, updated_at)
       SELECT 'con_' || printf('%026d', i), 'N' || i,
              trim(CASE WHEN i % 2 = 0 THEN 'Alpha ' ELSE '' END || CASE WHEN i % 6 = 0 THEN 'Bravo ' ELSE '' END ||
                   CASE WHEN i % 9 = 0 THEN 'Charlie ' ELSE '' END || CASE WHEN i % 50 = 0 THEN 'Delta ' ELSE '' END ||
                   CASE WHEN i % 1000 = 0 THEN 'Echo ' ELSE '' END || CASE WHEN i % (?1 / 10) = 7 THEN 'Foxtrot ' ELSE '' END ||
                   CASE WHEN i <= ?1 / 9 THEN 'Golf ' ELSE '' END || 'Z'),
              'contact' || i || '@example.com', NULL, '{"tags":[]}', '[]', '[]', ?2 + i * 1000, ?2 + i * 1000
       FROM n`,
      [CONTACTS, first],
    );
    keyContactNames(db.sqlite);
  }).immediate();
  await db.write(indexWaitingNames);
  console.log(`seeded ${CONTACTS.toLocaleString("en-US")} contacts in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

const NEEDLES: [string, string][] = [
  ["1 in 2", "Alpha"],
  ["1 in 6", "Bravo"],
  ["1 in 9", "Charlie"],
  ["1 in 50", "Delta"],
  ["1 in 1,000", "Echo"],
  ["10 contacts", "Foxtrot"],
  ["1 in 9, the oldest", "Golf"],
  ["1 in 9, 2 characters", "rl"],
  ["1 in 9, the oldest, 2 characters", "lf"],
];

const fastestOf = (work: () => Promise<unknown>) => fastest(work, RUNS);

try {
  await seed();
  const ms = (n: number) => n.toFixed(2).padStart(6);
  for (const [share, needle] of NEEDLES) {
    const filters = { fullName: needle };
    const matches = await countContacts(db, filters);
    if (against) {
      console.log(`${needle} (${share}): ${matches.toLocaleString("en-US")} matches; count and page, median of ${RUNS}, this checkout against ${process.env.BENCH_AGAINST}`);
      for (const direction of ["desc", "asc"] as const) {
        for (const pageNumber of [1, 40]) {
          const page = { sortBy: "created_at" as const, direction, cursor: null, limit: PER_PAGE + 1, offset: (pageNumber - 1) * PER_PAGE };
          const read = (store: Pick<Store, "countContacts" | "listContactVersions">) => async () => store.listContactVersions(db, filters, { ...page, matches: await store.countContacts(db, filters) });
          const { ours, theirs, difference } = await pairedRuns(read({ countContacts, listContactVersions }), read(against), RUNS);
          console.log(`  ${direction === "desc" ? "newest first" : "oldest first"}, page ${String(pageNumber).padStart(2)}: ${ms(ours)} ms against ${ms(theirs)} ms, difference ${ms(difference)} ms`);
        }
      }
      continue;
    }
    const count = await fastestOf(() => countContacts(db, filters));
    console.log(`${needle} (${share}): ${matches.toLocaleString("en-US")} matches, count ${ms(count)} ms`);
    for (const direction of ["desc", "asc"] as const) {
      for (const pageNumber of [1, 40]) {
        const page = { sortBy: "created_at" as const, direction, cursor: null, limit: PER_PAGE + 1, offset: (pageNumber - 1) * PER_PAGE, matches };
        const read = await fastestOf(() => listContactVersions(db, filters, page));
        console.log(`  ${direction === "desc" ? "newest first" : "oldest first"}, page ${String(pageNumber).padStart(2)}: page ${ms(read)} ms, with the count ${ms(read + count)} ms   ${await pagePlans(db, (spy) => listContactVersions(spy, filters, page))}`);
      }
    }
  }
} finally {
  await db.close();
  rmSync(dataDir, { recursive: true, force: true });
}
