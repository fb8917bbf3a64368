import type { Database } from "bun:sqlite";

interface Watch {
  generation: number;
  dataVersion: number;
  checkedThisTurn: boolean;
}

const watches = new WeakMap<Database, Watch>();

/**
 * outsideWritesGeneration returns a number that changes whenever another connection (a CLI
 * command such as `token revoke`, a second process) has committed to the database, so caches of
 * database rows can tell whether they may still be served. It reads SQLite's data_version at most
 * once per event-loop turn (~2 us each): a request that reached the server after such a commit was
 * read in a later turn's poll than the commit, so its check sees the change.
 */
export function outsideWritesGeneration(db: Database): number {
  let watch = watches.get(db);
  if (!watch) {
    watch = { generation: 0, dataVersion: readDataVersion(db), checkedThisTurn: true };
    watches.set(db, watch);
    setImmediate(endTurn, watch);
    return watch.generation;
  }
  if (!watch.checkedThisTurn) {
    watch.checkedThisTurn = true;
    setImmediate(endTurn, watch);
    const dataVersion = readDataVersion(db);
    if (dataVersion !== watch.dataVersion) {
      watch.dataVersion = dataVersion;
      watch.generation++;
    }
  }
  return watch.generation;
}

function endTurn(watch: Watch): void {
  watch.checkedThisTurn = false;
}

function readDataVersion(db: Database): number {
  return db.query<{ data_version: number }, []>("PRAGMA data_version").get()!.data_version;
}
