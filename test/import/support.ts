import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG } from "../../server/config.ts";
import { csvLine } from "../../server/import/csv.ts";
import type { TokenRate } from "../../server/limits/rate-limiter.ts";
import { startServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { testBackend } from "../support/backend.ts";

const ROOT = join(import.meta.dir, "../..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const MAIN = join(ROOT, "server/main.ts");

/** FAST is a token rate high enough that the limiter never slows a test import. */
export const FAST: TokenRate = { readPerSecond: 100_000, readBurst: 100_000, writePerSecond: 100_000, writeBurst: 100_000 };

/** importServer starts the real server on port 0 with a throwaway data directory, and writes a token file for the importer. */
export async function importServer(rate: TokenRate | null = FAST) {
  const dir = mkdtempSync(join(tmpdir(), "crm-import-"));
  const backend = await testBackend(dir);
  const server = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir: join(dir, "data"), ...backend.config }, createLogger("error", () => {}));
  const { token } = await createApiToken(server.runtime.db, "importer", Date.now(), rate);
  const tokenFile = join(dir, "token");
  writeFileSync(tokenFile, `${token}\n`);
  const db = server.runtime.db;
  return {
    dir,
    db,
    url: server.url,
    tokenFile,
    count: async (table = "contacts") => (await db.get<{ n: number }>(`SELECT count(*) AS n FROM ${table}`))!.n,
    /** snapshot is every contact with its account, without ids or times, in a stable order */
    snapshot: () =>
      db.all<Record<string, unknown>>(
        `SELECT c.email, c.first_name, c.last_name, c.external_id, c.properties, a.name AS account, a.domain
         FROM contacts c LEFT JOIN contact_accounts ca ON ca.contact_id = c.id LEFT JOIN accounts a ON a.id = ca.account_id
         ORDER BY c.email, c.external_id, c.first_name, c.last_name`,
      ),
    async stop() {
      await server.stop();
      await backend.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** startImport spawns `crm import contacts` from source, under `prefix` when given (SHUT_OUT); its output is read when it ends. */
export function startImport(args: string[], prefix: string[] = []) {
  const proc = Bun.spawn([...prefix, BUN, MAIN, "import", "contacts", ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore", env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" } });
  return {
    proc,
    async done() {
      const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      return { stdout, stderr, code };
    },
  };
}

/** runImport runs `crm import contacts` to its end, under `prefix` when given. */
export function runImport(args: string[], prefix: string[] = []) {
  return startImport(args, prefix).done();
}

export interface GeneratedCsv {
  path: string;
  rows: number;
  expected: { created: number; updated: number; unchanged: number; invalid: number };
  /** the 1-based numbers of the rows the API must refuse */
  badRows: number[];
  /** every data record as written, by row number */
  records: string[][];
  header: string[];
}

const FIRST = ["Zoë", "José", "Łukasz", "Ólafur", "Amélie", "Mårten", "Ana María", "Dvořák", "Ngọc", "李", "محمد", "Ελένη", "Søren", "O'Brien", "Grace"];
const LAST = ["Ñúñez", "Müller", "王", "Ødegård", "Šimić", "Nakamura 中村", "Smith, Jr.", 'the "Quoted"', "Lovelace", "Hopper"];

/**
 * writeContactsCsv writes `rows` rows: new people with accounts (some by domain, some by name
 * only), unicode names, notes with commas, quotes and line breaks, every 50th row a bad email,
 * a few websites that name no host (imported without a domain) and too-long names, and a last fifth repeating earlier people,
 * half identical (unchanged) and half with a new last name (updated).
 */
export function writeContactsCsv(dir: string, rows = 5000, name = "contacts.csv"): GeneratedCsv {
  const header = ["ID", "Email", "First Name", "Last Name", "Phone", "Company", "Website", "Notes", "Tags"];
  const records: string[][] = [];
  const badRows: number[] = [];
  const people: string[][] = [];
  const fresh = Math.floor(rows * 0.8);
  let created = 0;
  for (let i = 1; i <= fresh; i++) {
    const company = i % 7 === 0 ? ["", ""] : i % 3 === 0 ? [`Société ${i % 13} GmbH`, ""] : [`Acme ${i % 40}`, `acme${i % 40}.example`];
    let email = `person${i}@example.com`;
    let first = FIRST[i % FIRST.length]!;
    let website = company[1]!;
    let bad = false;
    if (i % 50 === 0) [email, bad] = [`person${i}.example.com`, true];
    else if (i % 997 === 0) [first, bad] = ["N".repeat(201), true];
    else if (i % 1499 === 0) website = "https://bad domain!";
    const record = [i % 5 === 0 ? `src-${i}` : "", email, first, LAST[i % LAST.length]!, i % 2 ? `+44 20 7946 ${String(i).padStart(4, "0")}` : "", company[0]!, website, i % 11 === 0 ? `note ${i}, with "quotes"\nand a second line` : "", i % 4 === 0 ? "vip;imported" : ""];
    records.push(record);
    if (bad) badRows.push(i);
    else {
      people.push(record);
      created++;
    }
  }
  let updated = 0;
  let unchanged = 0;
  for (let k = 0; records.length < rows; k++) {
    const again = [...people[(k * 3) % people.length]!];
    if (k % 2 === 0) {
      again[3] = `${again[3]} Jr`;
      updated++;
    } else unchanged++;
    records.push(again);
  }
  const path = join(dir, name);
  writeFileSync(path, `\uFEFF${[header, ...records].map((record) => csvLine(record)).join("\r\n")}\r\n`);
  return { path, rows, header, records, badRows, expected: { created, updated, unchanged, invalid: badRows.length } };
}

/** summaryLine is the importer's closing line for these counts. */
export function summaryLine(kind: "imported" | "trial, one row sent", rows: number, c: GeneratedCsv["expected"]): string {
  return `${kind}: ${rows} rows: created ${c.created}, updated ${c.updated}, unchanged ${c.unchanged}, invalid ${c.invalid}\n`;
}
