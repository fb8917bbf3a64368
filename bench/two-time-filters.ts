// A page of created_after and updated_after together (s32 plansqlite 1): this checkout's store
// against another's (BENCH_AGAINST), alternating, on a data directory seeded by the audit's
// bench/audit-plans-seed.ts (1,000,000 contacts). Prints each side's median, the pairs' median
// difference and the page plan of each side.
// usage: BENCH_AGAINST=/work/main bun bench/two-time-filters.ts DATA_DIR [RUNS]
import type { ContactFilters, ContactPage } from "../server/contacts/store.ts";
import * as ours from "../server/contacts/store.ts";
import { databasePath, openDatabase } from "../server/db/database.ts";
import { pagePlans, pairedRuns, storeAgainst } from "./paired.ts";

const dataDir = process.argv[2]!;
const runs = Number(process.argv[3] ?? 7);
const theirs = (await storeAgainst())!;
const db = openDatabase(databasePath(dataDir), "normal");
const at = (iso: string) => Date.parse(iso);
const cases: [string, ContactFilters, ContactPage["sortBy"], ContactPage["direction"]][] = [
  ["created 5 days, updated any, updated_at asc", { createdAfter: at("2026-11-24T00:00:00Z"), updatedAfter: at("2023-11-29T00:00:00Z") }, "updated_at", "asc"],
  ["created 5 days, updated any, first_name desc", { createdAfter: at("2026-11-24T00:00:00Z"), updatedAfter: at("2023-11-29T00:00:00Z") }, "first_name", "desc"],
  ["created any, updated 1 year, created_at desc", { createdAfter: at("2023-11-29T00:00:00Z"), updatedAfter: at("2025-11-29T00:00:00Z") }, "created_at", "desc"],
  ["created 1.5 years, updated any, updated_at desc", { createdAfter: at("2025-06-01T00:00:00Z"), updatedAfter: at("2023-11-29T00:00:00Z") }, "updated_at", "desc"],
];
for (const [label, filters, sortBy, direction] of cases) {
  // Counted for every list: a page that plans without the count ignores it.
  const matches = await ours.countContacts(db, filters);
  const page: ContactPage = { sortBy, direction, cursor: null, limit: 26, offset: 0, matches };
  const [a, b] = [await ours.listContactVersions(db, filters, page), await theirs.listContactVersions(db, filters, page)];
  const same = JSON.stringify(a.map((r) => r.id)) === JSON.stringify(b.map((r) => r.id));
  const timed = await pairedRuns(() => ours.listContactVersions(db, filters, page), () => theirs.listContactVersions(db, filters, page), runs);
  console.log(`${label} (${matches} match; same page: ${same})`);
  console.log(`  ours ${timed.ours.toFixed(1)} ms, theirs ${timed.theirs.toFixed(1)} ms, pairs' median difference ${timed.difference.toFixed(1)} ms`);
  console.log(`  ours:   ${await pagePlans(db, (spy) => ours.listContactVersions(spy, filters, page))}`);
  console.log(`  theirs: ${await pagePlans(db, (spy) => theirs.listContactVersions(spy, filters, page))}`);
}
db.close();
