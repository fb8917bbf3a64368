import type { Db } from "../../server/db/sql.ts";

/** tablesOf lists the tables of the database: on SQLite every table, FTS shadow tables included; on PostgreSQL the service's schema. */
async function tablesOf(db: Db): Promise<string[]> {
  if (db.dialect === "sqlite") return (await db.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")).map((r) => r.name);
  return (await db.all<{ name: string }>("SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'")).map((r) => r.name);
}

/** tablesHolding returns, for each text, the tables with rows holding it anywhere (any column's text or bytes), with how many rows. */
export async function tablesHolding(db: Db, texts: string[]): Promise<Record<string, Record<string, number>>> {
  const out: Record<string, Record<string, number>> = {};
  const tables = await tablesOf(db);
  for (const text of texts) {
    const found: Record<string, number> = {};
    for (const table of tables) {
      let n: number;
      if (db.dialect === "sqlite") {
        const columns = (await db.all<{ name: string }>(`SELECT name FROM pragma_table_info('${table}')`)).map((c) => c.name);
        if (columns.length === 0) continue;
        const holds = columns.map((c) => `instr(CAST("${c}" AS BLOB), CAST(? AS BLOB)) > 0`).join(" OR ");
        n = (await db.get<{ n: number }>(`SELECT count(*) AS n FROM "${table}" WHERE ${holds}`, columns.map(() => text)))!.n;
      } else {
        n = Number((await db.get<{ n: number }>(`SELECT count(*) AS n FROM "${table}" t WHERE t::text ILIKE ?`, [`%${text}%`]))!.n);
      }
      if (n > 0) found[table] = n;
    }
    out[text] = found;
  }
  return out;
}
