// bun bench/pg-collected.ts POSTGRES_URL: contact lists on PostgreSQL whose matches sit together in
// the sort's order (collectsMatches in server/contacts/store.ts), with controls, each page of 25
// read with its count in one snapshot and planned for its values, as the list service reads it.
// Needs the seed of the s32 plans audit (200,000 contacts: bench/audit-plans-seed.ts on branch
// audit-plans, copied with `crm copy-to-postgres`). BENCH_RUNS (default 15) alternating rounds.
// BENCH_AGAINST=<another checkout> (say /work/main) reads each through that checkout's store too,
// alternating which goes first, and prints both medians and the median of the pairs' differences.
import * as ours from "../server/contacts/store.ts";
import { planPerValue, type ContactFilters } from "../server/contacts/store.ts";
import type { ContactSort } from "../server/contacts/model.ts";
import { openPostgres } from "../server/db/postgres.ts";
import { fastest, pairedRuns, storeAgainst, type Store } from "./paired.ts";

const url = process.argv[2];
if (!url) throw new Error("usage: bun bench/pg-collected.ts POSTGRES_URL");
const RUNS = Number(process.env.BENCH_RUNS ?? 15);
const db = await openPostgres(url, 2);
const against = await storeAgainst();
const at = (iso: string) => Date.parse(iso);

const LISTS: [string, ContactFilters, ContactSort, "asc" | "desc", number?][] = [
  ["full_name=smith, last_name asc", { fullName: "smith" }, "last_name", "asc"],
  ["full_name=smith, last_name asc, page 40", { fullName: "smith" }, "last_name", "asc", 39 * 25],
  ["full_name=smith, created_at desc (control)", { fullName: "smith" }, "created_at", "desc"],
  ["full_name=john, first_name asc", { fullName: "john" }, "first_name", "asc"],
  ["full_name=john, created_at desc (control)", { fullName: "john" }, "created_at", "desc"],
  ["created_after=<5 days>, updated_at asc", { createdAfter: at("2026-11-24T00:00:00Z") }, "updated_at", "asc"],
  ["created_after=<1 year>, updated_at asc (broad: unchanged)", { createdAfter: at("2025-11-29T00:00:00Z") }, "updated_at", "asc"],
  ["tag=half,old, updated_at desc (window misses)", { tags: ["half", "old"] }, "updated_at", "desc"],
  ["full_name=smith&created_after=<1 year>, last_name asc", { fullName: "smith", createdAfter: at("2025-11-29T00:00:00Z") }, "last_name", "asc"],
  ["full_name=smith&tag=half, last_name asc", { fullName: "smith", tags: ["half"] }, "last_name", "asc"],
  ["full_name=john&account_id=BIG, first_name asc", { fullName: "john", accountId: "acc_BIG00000000000000000000000" }, "first_name", "asc"],
  ["full_name=st, created_at desc (broad: unchanged)", { fullName: "st" }, "created_at", "desc"],
];

/** pageWithCount reads the count and the page through `store` in one snapshot, as the list service does. */
const pageWithCount = (store: Store, filters: ContactFilters, sortBy: ContactSort, direction: "asc" | "desc", offset: number) =>
  db.read(async (tx) => {
    await planPerValue(tx);
    const matches = await store.countContacts(tx, filters);
    const rows = await store.listContactVersions(tx, filters, { sortBy, direction, cursor: null, limit: 26, offset, matches });
    return { matches, ids: rows.map((row) => row.id).join() };
  });

for (const [label, filters, sortBy, direction, offset = 0] of LISTS) {
  const read = await pageWithCount(ours, filters, sortBy, direction, offset);
  if (!against) {
    console.log(`${label}: ${read.matches} match, ${(await fastest(() => pageWithCount(ours, filters, sortBy, direction, offset), RUNS)).toFixed(1)} ms (min of ${RUNS})`);
    continue;
  }
  const theirs = await pageWithCount(against, filters, sortBy, direction, offset);
  if (theirs.ids !== read.ids || theirs.matches !== read.matches) throw new Error(`${label}: the two checkouts read different pages`);
  const { ours: mine, theirs: other, difference } = await pairedRuns(() => pageWithCount(ours, filters, sortBy, direction, offset), () => pageWithCount(against, filters, sortBy, direction, offset), RUNS);
  console.log(`${label}: ${read.matches} match, same page; this ${mine.toFixed(1)} ms, against ${other.toFixed(1)} ms, pairs' median difference ${difference.toFixed(1)} ms (${RUNS} pairs)`);
}
await db.close();
