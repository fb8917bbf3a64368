import { readFileSync } from "node:fs";
import { MAX_ATTEMPTS_AT_ONCE } from "../webhooks/worker.ts";

/**
 * DESCRIPTOR_RESERVE is the descriptors kept beside the client connections: two for each webhook
 * attempt at once (an attempt races a second address when the first is slow to connect), and 64
 * for the database, its WAL and read lanes, the log, DNS lookups and PostgreSQL's pool.
 */
export const DESCRIPTOR_RESERVE = 2 * MAX_ATTEMPTS_AT_ONCE + 64;

/**
 * openFileLimit is the process's soft limit on open files (RLIMIT_NOFILE) as /proc/self/limits
 * gives it, or null where there is no such file or no finite limit. Bun raises the soft limit to
 * the hard one when it starts (neither it nor Node can set it), so this is what the service has.
 */
export function openFileLimit(read: () => string = () => readFileSync("/proc/self/limits", "utf8")): number | null {
  let text: string;
  try {
    text = read();
  } catch {
    return null;
  }
  const soft = /^Max open files\s+(\d+)/m.exec(text)?.[1];
  return soft === undefined ? null : Number(soft);
}

/**
 * connectionCapWithin is the connection cap that `limit` open files can hold beside
 * DESCRIPTOR_RESERVE, when it is lower than `maxConnections`; null when they fit (or the limit is
 * unknown). Past the descriptors Bun's accept fails and the client hangs in the backlog unanswered:
 * under this cap it is answered 503 too-many-connections instead.
 */
export function connectionCapWithin(maxConnections: number, limit: number | null): number | null {
  if (limit === null || maxConnections + DESCRIPTOR_RESERVE <= limit) return null;
  return Math.max(1, limit - DESCRIPTOR_RESERVE);
}
