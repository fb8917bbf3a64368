// Timings for the in-process list benches (names.ts, relation-windows.ts): the fastest of runs, the
// page statements' plans, and pairs that compare this checkout's code with another's in one
// process (BENCH_AGAINST): on a shared machine, load moves both sides of a pair alike.
import { join, resolve } from "node:path";
import type { SqliteDatabase } from "../server/db/database.ts";
import type { Db } from "../server/db/sql.ts";
import { capturing, queryPlan } from "../test/support/query-plans.ts";

/** Store is the contacts store module, of this checkout or another. */
export type Store = typeof import("../server/contacts/store.ts");

/** storeAgainst imports the contacts store of the checkout BENCH_AGAINST names, or returns null without it. */
export async function storeAgainst(): Promise<Store | null> {
  const checkout = process.env.BENCH_AGAINST;
  return checkout ? import(join(resolve(checkout), "server/contacts/store.ts")) : null;
}

/** median is the middle of the times (the mean of the two middle ones for an even number). */
export function median(times: number[]): number {
  const sorted = [...times].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** pairedRuns times `ours` and `theirs` `runs` times each, alternating which goes first, and returns both medians and the median of the pairs' differences (ours less theirs), in ms. */
export async function pairedRuns(ours: () => Promise<unknown>, theirs: () => Promise<unknown>, runs: number): Promise<{ ours: number; theirs: number; difference: number }> {
  const timed = async (work: () => Promise<unknown>) => {
    const started = performance.now();
    await work();
    return performance.now() - started;
  };
  const times = { ours: [] as number[], theirs: [] as number[] };
  for (let run = 0; run < runs; run++) {
    if (run % 2) {
      times.theirs.push(await timed(theirs));
      times.ours.push(await timed(ours));
    } else {
      times.ours.push(await timed(ours));
      times.theirs.push(await timed(theirs));
    }
  }
  return { ours: median(times.ours), theirs: median(times.theirs), difference: median(times.ours.map((time, run) => time - times.theirs[run]!)) };
}

/** fastest runs `work` `runs` times and returns its fastest time in ms. */
export async function fastest(work: () => Promise<unknown>, runs: number): Promise<number> {
  let best = Infinity;
  for (let run = 0; run < runs; run++) {
    const started = performance.now();
    await work();
    best = Math.min(best, performance.now() - started);
  }
  return best;
}

/** pagePlans names the plan of each page statement `read` runs: a window that held too few matches is followed by the fetch. */
export async function pagePlans(db: SqliteDatabase, read: (spy: Db) => Promise<unknown>): Promise<string> {
  const { db: spy, captured } = capturing(db);
  await read(spy);
  return captured.filter((c) => c.sql.startsWith("SELECT c.id")).map((c) => queryPlan(db.sqlite, c).join(" | ")).join("  THEN  ");
}
