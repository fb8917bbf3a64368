import { accessSync, constants, realpathSync, statSync, type Stats } from "node:fs";
import { basename, dirname } from "node:path";
import { accountItemErrors } from "../accounts/service.ts";
import { ConfigError } from "../config.ts";
import { contactItemErrorsBeforeMatch } from "../contacts/service.ts";
import type { BatchResult } from "../batch/model.ts";
import { parseSafeJson } from "../http/safe-json.ts";
import { MAX_BATCH_ITEMS, MAX_BODY_BYTES } from "../limits/limits.ts";
import { sha256 } from "../shared/crypto.ts";
import { createOwnerOnlyFile, statIfThere } from "../shared/files.ts";
import { cutTo, printable } from "../shared/text.ts";
import { ProblemError, type FieldError } from "../shared/problem.ts";
import { BatchClient, ImportError } from "./client.ts";
import { csvLine, SEPARATORS } from "./csv.ts";
import { Progress, type ProgressSink } from "./progress.ts";
import { accountKey, columnMap, columnOf, FileChanged, IMPORTER_COLUMNS, readSourceFile, sameInodeSizeAndTime, textPieces, toImportRow, type ColumnMap, type CsvStyle, type ImportRow, type SourceFile } from "./rows.ts";
import { errorCode } from "../shared/thrown.ts";

export interface ImportOptions {
  file: string;
  /** the server's base URL and an API token; not needed for a dry run */
  api?: { url: string; token: string };
  map?: string;
  /** send the first row only, then stop (the contract's advice before a large import) */
  trial?: boolean;
  /** validate every row against the API's schemas without sending anything */
  dryRun?: boolean;
  /** where the invalid rows go; default FILE.invalid.csv (or .jsonl) beside the input */
  invalidFile?: string;
  /** progress and notes (stderr) */
  progress: ProgressSink;
}

export interface ImportSummary {
  rows: number;
  /** records of empty cells only, not counted in rows (SourceFile.skipped) */
  skipped: number;
  created: number;
  updated: number;
  unchanged: number;
  invalid: number;
  /** dry run: rows that would be sent */
  valid?: number;
  invalidFile: string | null;
  /** why the invalid rows could not be written (a full disk), naming the file; the import itself is done */
  invalidFileError: string | null;
}

/** importCounts is what an import did with the rows it sent, as its summary says it: "created 2, updated 0, unchanged 0, invalid 1". */
export const importCounts = (summary: Pick<ImportSummary, "created" | "updated" | "unchanged" | "invalid">) => `created ${summary.created}, updated ${summary.updated}, unchanged ${summary.unchanged}, invalid ${summary.invalid}`;

/** InvalidRow is a row refused locally or by the server, with its errors named by column. */
interface InvalidRow {
  row: number;
  errors: string[];
}

/** errorLines names each error by the column it comes from: "Email: must be an email address ...". */
const errorLines = (map: ColumnMap, errors: FieldError[], prefix = "") => errors.map((e) => `${e.pointer ? columnOf(map, prefix + e.pointer) : prefix ? "account" : "row"}: ${e.detail}`);
/** lineErrorLines names each error of a refused JSON Lines line (or CSV record) by the column it is in: "/custom_fields/meta/constructor" is in custom_fields.meta. */
const lineErrorLines = (errors: FieldError[]) => errors.map((e) => `${e.pointer ? e.pointer.slice(1).split("/").slice(0, 2).join(".") : "line"}: ${e.detail}`);
/** withinItem drops the /items/N part of a batch error's pointer: what is left points into the item. */
const withinItem = (errors: FieldError[] = []) => errors.map((e) => ({ ...e, pointer: e.pointer?.replace(/^\/items\/\d+/, "") }));

/**
 * importContacts imports a CSV or JSON Lines file of contacts through the batch API: accounts
 * resolved or created first, then contacts in batches of 100 in file order, each batch with an
 * Idempotency-Key made of the file's name, size, column mapping and row range, so running it
 * again after a crash (within the server's 24 h replay window) creates nothing twice.
 */
export async function importContacts(options: ImportOptions): Promise<ImportSummary> {
  const unchanged = sameInodeSizeAndTime(options.file);
  const source = readSourceFile(options.file, () => textPieces(options.file, unchanged));
  const { map, ignored } = columnMap(source.columns, options.map);
  const invalidFile = checkedInvalidFile(options, source.format);
  const note = (line: string) => options.progress.write(`${line}\n`);
  if (source.style && source.style.separator !== ",") note(`read as ${SEPARATORS[source.style.separator]}-separated: the header has no comma`);
  // The column names are the file's: escaped, a header cannot act on the operator's terminal.
  note(`columns: ${[...map].map(([column, target]) => `${printable(column)} -> ${printable(target)}`).join(", ") || "none mapped"}${ignored.length ? `; ignored: ${ignored.map(printable).join(", ")}` : ""}`);
  const trial = options.trial && !options.dryRun;
  const rowCount = trial ? Math.min(1, source.rowCount) : source.rowCount;
  // Read again on each call, one row at a time: the file's rows are never all held at once.
  const rows = () => importRows(source, map, rowCount);
  const invalid: InvalidRow[] = [];
  const summary: ImportSummary = { rows: rowCount, skipped: trial ? 0 : source.skipped, created: 0, updated: 0, unchanged: 0, invalid: 0, invalidFile: null, invalidFileError: null };

  const readAsNone = new ReadAsNone();
  if (options.dryRun) {
    for (const row of rows()) {
      const errors = localErrors(row, map);
      if (errors.length > 0) invalid.push({ row: row.row, errors });
      readAsNone.count(row);
    }
    for (const line of readAsNone.notes(map)) note(line);
    return finish(invalidFile, source, invalid, { ...summary, valid: rowCount - invalid.length, invalid: invalid.length });
  }

  if (!options.api) throw new Error("importContacts needs the API unless it is a dry run");
  const progress = new Progress(rowCount, options.progress);
  const client = new BatchClient(options.api.url, options.api.token, (seconds, why) => {
    if (why !== "rate limited") progress.note(`waiting ${seconds} s: ${why}`);
  });
  // The key names what is imported (contacts), the file (its name and size), how its columns map
  // and the rows a batch carries; a trial has its own. Whatever changes a batch's body must change
  // its key: the server refuses a key already used with another body (another --map) for 24 h.
  const keyMaterial = JSON.stringify(["contacts", basename(options.file), statSync(options.file).size, [...map]]);
  const keyPrefix = `crm-import-${shortHash(keyMaterial)}${options.trial ? "-trial" : ""}`;

  let accountsNote: string | undefined;
  let done = 0;
  let replayed = 0;
  try {
    const accounts = await resolveAccounts(client, rows(), keyPrefix, map);
    const sending: Sending = { client, accounts, keyPrefix, map, note: (line) => progress.note(line) };
    const record = (entry: PreparedRow, result?: BatchResult) => {
      if ("errors" in entry) invalid.push({ row: entry.row.row, errors: entry.errors });
      else count(summary, result!, entry.row, map, invalid);
    };
    const refusedAccounts = [...accounts.values()].filter((outcome) => "errors" in outcome).length;
    accountsNote = `accounts: ${accounts.size - refusedAccounts} created or found${refusedAccounts ? `, ${refusedAccounts} invalid (their rows are too)` : ""}`;
    if (accounts.size > 0) progress.note(accountsNote);
    // The first row goes alone under the trial's key: after a --trial, the run replays it instead of
    // creating again a row that no email or external id matches. Its body also holds the id its
    // account got in this run, the one part not from the file: another once the trial's account
    // was deleted (or merged away). The key names that id, so such a row is a new request, not a
    // body changed under its key, which the server refuses as if the file had changed.
    const trialKeyPrefix = options.trial ? keyPrefix : `${keyPrefix}-trial`;
    let n = -1;
    for (const chunk of firstAloneThenBatches(preparedRows(rows(), accounts, map), (entry) => ("item" in entry ? JSON.stringify(entry.item) : ""))) {
      n++;
      const sendable = chunk.filter((entry) => "item" in entry);
      for (const entry of chunk) {
        if ("errors" in entry) record(entry);
        readAsNone.count(entry.row);
      }
      if (sendable.length > 0) {
        const range = `rows-${chunk[0]!.row.row}-${chunk.at(-1)!.row.row}`;
        const first = sendable[0]!;
        const key = n === 0 ? `${trialKeyPrefix}-${range}${first.accountId ? `-${first.accountId}` : ""}` : `${keyPrefix}-${range}`;
        replayed += await sendRows(sending, sendable, key, record);
      }
      done += chunk.length;
      progress.update(done);
    }
  } catch (error) {
    if (!(error instanceof FileChanged)) throw error;
    // What was sent stays sent: the operator is told what, in the words of the import's own report.
    const sent = accountsNote === undefined ? "nothing was sent" : `sent before it did: ${accountsNote}; ${done} of ${rowCount} rows: ${importCounts({ ...summary, invalid: invalid.length })}`;
    throw new ImportError(`${error.message}; ${sent}; import it again once nothing writes to it`, false);
  }
  progress.finish();
  for (const line of readAsNone.notes(map)) progress.note(line);
  // The first row's batch is answered from a --trial as well as from a whole run: the note names both.
  if (replayed > 0) {
    const rowsWere = replayed === 1 ? "1 row was" : `${replayed} rows were`;
    progress.note(`${rowsWere} answered from an earlier run of this file or its --trial (within 24 h): ${replayed === 1 ? "its" : "their"} counts are that run's, and nothing was applied again`);
  }
  return finish(invalidFile, source, invalid, { ...summary, invalid: invalid.length });
}

/** NAMED_IN_A_NOTE is how many values a note on stderr names, before saying how many more. */
const NAMED_IN_A_NOTE = 10;

/** someNamed lists the values a note names, out of `count`: `row 3 "...", row 7 "acme .com", and 4 more`. */
const someNamed = (named: string[], count: number) => `${named.join(", ")}${count > named.length ? `, and ${count - named.length} more` : ""}`;

/** Cells is a column's cells read as no value: how many, and the first NAMED_IN_A_NOTE by row. */
interface Cells {
  count: number;
  named: { row: number; value: string }[];
}

/**
 * ReadAsNone collects the cells the import reads as no value though they hold one, to name them once
 * it is done: websites that name no host (ImportRow.notDomain), whose rows were imported, their
 * companies matched by name, where a typo wants fixing (imported again with it, the account found by
 * name gets the domain); and placeholder companies (ImportRow.noCompany), whose rows have no account.
 */
class ReadAsNone {
  private readonly websites: Cells = { count: 0, named: [] };
  private readonly companies: Cells = { count: 0, named: [] };

  /** count notes a row's cells read as no value. */
  count(row: ImportRow): void {
    ReadAsNone.add(this.websites, row.row, row.notDomain);
    ReadAsNone.add(this.companies, row.row, row.noCompany);
  }

  /** notes are the lines telling of them, one a column: `Website: 2 values are not a domain name, each read as no website ...: row 3 "...", row 7 "acme .com"`. */
  notes(map: ColumnMap): string[] {
    return [
      ...ReadAsNone.note(columnOf(map, "/account/domain"), this.websites, "not a domain name", "no website (its company found by name)"),
      ...ReadAsNone.note(columnOf(map, "/account/name"), this.companies, "a placeholder", "no company"),
    ];
  }

  private static add(cells: Cells, row: number, value: string | undefined): void {
    if (value === undefined) return;
    cells.count++;
    if (cells.named.length < NAMED_IN_A_NOTE) cells.named.push({ row, value });
  }

  private static note(column: string, cells: Cells, are: string, readAs: string): string[] {
    if (cells.count === 0) return [];
    const named = cells.named.map(({ row, value }) => `row ${row} ${printable(JSON.stringify(cutTo(value, 60)))}`);
    const values = cells.count === 1 ? `1 value is ${are}, read` : `${cells.count} values are ${are}, each read`;
    return [`${printable(column)}: ${values} as ${readAs}: ${someNamed(named, cells.count)}`];
  }
}

/** importRows turns the first `limit` rows of the file into API items, one at a time. */
function* importRows(source: SourceFile, map: ColumnMap, limit: number): Generator<ImportRow> {
  if (limit === 0) return;
  for (const row of source.rows()) {
    yield toImportRow(row, map);
    if (row.row >= limit) return;
  }
}

/**
 * localErrors is why the server would refuse the row whatever it holds, by column: its JSON Lines
 * line, or its contact and account as the API's own checks (schemas, limits, a contact naming
 * nobody) and its body parser refuse them (a NUL, a lone surrogate, a row too large for a request:
 * sent, such a row would fail its whole batch). --dry-run reports them; an import sends such a row
 * nowhere, neither its contact nor its account.
 */
function localErrors(row: ImportRow, map: ColumnMap): string[] {
  if (row.refusal) return lineErrorLines(row.refusal);
  return [
    ...errorLines(map, [...bodyRefusal(row.contact), ...contactItemErrorsBeforeMatch(row.contact)]),
    ...(row.account ? errorLines(map, [...bodyRefusal(row.account), ...accountItemErrors(row.account)], "/account") : []),
  ];
}

type SendableRow = { row: ImportRow; item: unknown; accountId: string | null };
type PreparedRow = SendableRow | { row: ImportRow; errors: string[] };

/**
 * preparedRows gives each row the id of its account, or makes it invalid: refused locally
 * (localErrors), its account refused by the server, or too large for a request once it carries
 * the account's id.
 */
function* preparedRows(rows: Iterable<ImportRow>, accounts: Map<string, AccountOutcome>, map: ColumnMap): Generator<PreparedRow> {
  for (const row of rows) {
    const errors = localErrors(row, map);
    if (errors.length > 0) {
      yield { row, errors };
      continue;
    }
    const account = row.account ? accounts.get(accountKey(row.account)) : null;
    // Sent without it, the contact would lose its account and count as imported all the same.
    if (account === undefined) throw new Error(`row ${row.row}: its account was not resolved before its contact`);
    if (account && "errors" in account) {
      yield { row, errors: account.errors };
      continue;
    }
    const item = account ? { ...row.contact, account_ids: [account.id] } : row.contact;
    const refusal = bodyRefusal(item);
    yield refusal.length > 0 ? { row, errors: errorLines(map, refusal) } : { row, item, accountId: account?.id ?? null };
  }
}

/** firstAloneThenBatches sends the first entry in a batch of its own, then the others in batchesOf. */
function* firstAloneThenBatches<T>(entries: Iterable<T>, json: (entry: T) => string): Generator<T[]> {
  const iterator = entries[Symbol.iterator]();
  try {
    const first = iterator.next();
    if (first.done) return;
    yield [first.value];
    yield* batchesOf({ [Symbol.iterator]: () => iterator }, json);
  } finally {
    // Closes the file when the import stops part-way.
    iterator.return?.();
  }
}

/**
 * bodyRefusal is why the server's body parser would refuse a batch carrying this item (parseSafeJson:
 * a NUL, an unpaired surrogate, a __proto__ key ...; or a size no request may have), as field
 * errors within the item; empty when it would take it.
 */
function bodyRefusal(item: unknown): FieldError[] {
  const json = JSON.stringify(item);
  if (Buffer.byteLength(json) > BATCH_BODY_BUDGET) return [{ pointer: "", detail: `the row is larger than a request to the server may be (${MAX_BODY_BYTES} bytes)` }];
  try {
    parseSafeJson(json);
    return [];
  } catch (error) {
    if (!(error instanceof ProblemError)) throw error;
    return error.errors ?? [{ pointer: "", detail: error.message }];
  }
}

/** Sending is what sending rows needs besides the rows: the client, the accounts resolved so far (sendRows remakes those gone), the key prefix, the map, and where notes go. */
interface Sending {
  client: BatchClient;
  accounts: Map<string, AccountOutcome>;
  keyPrefix: string;
  map: ColumnMap;
  note: (line: string) => void;
}

/** MAX_REMAKES is how many times a batch's rows are sent again after their accounts were made again: each time would need the new ones deleted meanwhile. */
const MAX_REMAKES = 3;

/**
 * sendRows upserts rows as one contacts batch under `key`, hands each row with its result to
 * `record`, and answers how many were answered from an earlier run. A row refused only because its
 * account no longer exists (deleted since this import or an earlier run of it found or made it: the
 * accounts batch replays that run's ids) is not refused for it: the account is made or found again
 * (remakeAccounts) and such rows are sent again naming it, under a key that names the new ids, as
 * the first row's key names its account's.
 */
async function sendRows(sending: Sending, rows: SendableRow[], key: string, record: (entry: PreparedRow, result?: BatchResult) => void, remakes = 0): Promise<number> {
  // Each custom_fields.KEY column is a field of its own: an empty cell, or a key the file has no
  // column for, must keep what the contact holds, where custom_fields alone would replace it whole.
  // A row's company is one of the contact's accounts: the others (linked elsewhere, or by an
  // earlier row of the same person) stay, added to in the batch's own write, not read and resent.
  const answer = await sending.client.upsert("/public/v1/contacts/batch", rows.map((entry) => entry.item), key, { merge_custom_fields: true, add_account_ids: true });
  const gone = remakes < MAX_REMAKES ? rows.filter((_, i) => accountGone(answer.results[i]!)) : [];
  rows.forEach((entry, i) => {
    if (!gone.includes(entry)) record(entry, answer.results[i]);
  });
  const replayed = answer.replayed ? rows.length - gone.length : 0;
  if (gone.length === 0) return replayed;
  await remakeAccounts(sending, gone);
  const again: SendableRow[] = [];
  for (const entry of preparedRows(gone.map((entry) => entry.row), sending.accounts, sending.map)) {
    if ("errors" in entry) record(entry);
    else again.push(entry);
  }
  if (again.length === 0) return replayed;
  // Named by what it sends, the new ids among it: the same key is always the same body.
  return replayed + (await sendRows(sending, again, `${key}-again-${shortHash(JSON.stringify(again.map((entry) => entry.item)))}`, record, remakes + 1));
}

/** accountGone tells a contact refused only for its account's id, which no account has: the import's only id names the row's account. */
const accountGone = (result: BatchResult) => result.status === "invalid" && (result.errors ?? []).length > 0 && result.errors!.every((e) => /^\/items\/\d+\/account_ids\/0$/.test(e.pointer ?? ""));

/**
 * remakeAccounts upserts again the accounts of rows refused for their account's id, which no
 * account has any more, and keeps what they are now (made again, found again by domain or name, or
 * refused) for them and the rows after. Its key names the accounts and the ids gone: a run after
 * replays it, and the new ones gone too would be made again under another.
 */
async function remakeAccounts(sending: Sending, gone: SendableRow[]): Promise<void> {
  const missing = new Map(gone.map(({ row, accountId }) => [accountKey(row.account!), { account: row.account!, accountId }]));
  const accounts = [...missing.values()].map(({ account }) => account);
  const { results } = await sending.client.upsert("/public/v1/accounts/batch", accounts, `${sending.keyPrefix}-accounts-again-${shortHash(JSON.stringify([...missing.values()]))}`);
  [...missing.keys()].forEach((key, i) => sending.accounts.set(key, accountOutcome(results[i]!, sending.map)));
  const names = accounts.slice(0, NAMED_IN_A_NOTE).map((account) => printable(JSON.stringify(cutTo(account.name, 60))));
  const them = missing.size === 1 ? "1 no longer exists (deleted since this import or an earlier run of it found or made it), made or found again for the rows naming it" : `${missing.size} no longer exist (deleted since this import or an earlier run of it found or made them), made or found again for the rows naming them`;
  sending.note(`accounts: ${them}: ${someNamed(names, missing.size)}`);
}

function count(summary: ImportSummary, result: BatchResult, row: ImportRow, map: ColumnMap, invalid: InvalidRow[]): void {
  if (result.status === "invalid") invalid.push({ row: row.row, errors: errorLines(map, withinItem(result.errors)) });
  else summary[result.status]++;
}

type AccountOutcome = { id: string } | { errors: string[] };

/** BATCH_BODY_BUDGET keeps a batch's body under the server's limit, with room for the envelope. */
const BATCH_BODY_BUDGET = MAX_BODY_BYTES - 4096;

/** batchesOf cuts entries, in order, into batches of at most MAX_BATCH_ITEMS whose JSON fits one request body; the cut depends only on the entries, so a re-run cuts alike. */
function* batchesOf<T>(entries: Iterable<T>, json: (entry: T) => string): Generator<T[]> {
  let current: T[] = [];
  let bytes = 0;
  for (const entry of entries) {
    const size = Buffer.byteLength(json(entry)) + 1;
    if (current.length === MAX_BATCH_ITEMS || (current.length > 0 && bytes + size > BATCH_BODY_BUDGET)) {
      yield current;
      current = [];
      bytes = 0;
    }
    current.push(entry);
    bytes += size;
  }
  if (current.length > 0) yield current;
}

/**
 * resolveAccounts upserts each distinct account (by domain, else name) of the rows not refused
 * locally (localErrors) once, in batches, before any contact refers to it: a row the import will
 * not send leaves no account behind.
 */
async function resolveAccounts(client: BatchClient, rows: Iterable<ImportRow>, keyPrefix: string, map: ColumnMap): Promise<Map<string, AccountOutcome>> {
  const distinct = new Map<string, { name: string; domain?: string }>();
  for (const row of rows) if (row.account && !distinct.has(accountKey(row.account)) && localErrors(row, map).length === 0) distinct.set(accountKey(row.account), row.account);
  const outcomes = new Map<string, AccountOutcome>();
  let start = 0;
  for (const chunk of batchesOf(distinct, ([, account]) => JSON.stringify(account))) {
    const { results } = await client.upsert("/public/v1/accounts/batch", chunk.map(([, account]) => account), `${keyPrefix}-accounts-${start + 1}-${start + chunk.length}`);
    start += chunk.length;
    results.forEach((result, i) => outcomes.set(chunk[i]![0], accountOutcome(result, map)));
  }
  return outcomes;
}

/** accountOutcome is an account item's result as its rows take it: the account's id, or its errors by column. */
const accountOutcome = (result: BatchResult, map: ColumnMap): AccountOutcome => (result.id ? { id: result.id } : { errors: errorLines(map, withinItem(result.errors), "/account") });

/** shortHash is 24 hex digits of the SHA-256 of a text, for an Idempotency-Key. */
const shortHash = (text: string) => Buffer.from(sha256(text)).toString("hex").slice(0, 24);

/**
 * checkedInvalidFile is where the invalid rows will go (--invalid-file, else FILE.invalid.csv or
 * .jsonl beside the input), refused before anything is sent when it is a directory, cannot be
 * written or is the input file itself: found at the end, the rows would be imported and their
 * errors lost, or the input overwritten.
 */
function checkedInvalidFile(options: ImportOptions, format: SourceFile["format"]): string {
  const path = options.invalidFile ?? `${options.file.replace(/\.(csv|jsonl|ndjson)$/i, "")}.invalid.${format}`;
  const refuse = (why: string) => new ConfigError(`import: the invalid rows would go to ${path}, ${why}; choose another file with --invalid-file`);
  let existing: Stats | undefined;
  try {
    existing = statIfThere(path);
  } catch (error) {
    // stat needs only to enter the folders above: one of them is shut.
    throw refuse(`which cannot be written (${errorCode(error) === "EACCES" ? "in a folder this user may not enter" : (error as Error).message})`);
  }
  if (existing?.isDirectory()) throw refuse("a directory");
  if (existing && realpathSync(path) === realpathSync(options.file)) throw refuse("the input file itself");
  try {
    accessSync(existing ? path : dirname(path), constants.W_OK);
  } catch (error) {
    throw refuse(`which cannot be written (${(error as Error).message})`);
  }
  return path;
}

/** finish writes the invalid rows, with their errors, to a file ready to fix and import again; a failed write goes in the summary, not thrown. */
async function finish(path: string, source: SourceFile, invalid: InvalidRow[], summary: ImportSummary): Promise<ImportSummary> {
  if (invalid.length === 0) return summary;
  const errorsOf = new Map(invalid.map(({ row, errors }) => [row, errors]));
  // An invalid-rows file imported again has the two columns already: added twice, its own invalid rows could not be imported.
  const header = [...source.columns, ...IMPORTER_COLUMNS.filter((column) => !source.columns.includes(column))];
  const style: CsvStyle = source.style ?? { bom: false, separator: ",", lineBreak: "\n" };
  const lines = source.format === "csv" ? [csvLine(header, style.separator)] : [];
  const unwritten = (why: string) => ({ ...summary, invalidFileError: `cannot write the invalid rows to ${path}: ${why}` });
  try {
    for (const { row, fields, original, refused, importRow } of source.rows()) {
      const errors = errorsOf.get(row);
      if (!errors) continue;
      if (source.format === "csv") lines.push(csvLine(invalidCells(header, fields ?? [], row, errors), style.separator));
      // A refused line is kept as written (JSON.parse would have rounded its large integers). Either
      // comes without the import_row and import_errors of an invalid-rows file: each is written once.
      else lines.push(appendedTo(refused?.line ?? JSON.stringify(original), `"import_row":${importRow ?? row},"import_errors":${JSON.stringify(errors)}`));
    }
  } catch (error) {
    // Changed once its rows were sent, the file no longer holds the rows that were refused; the rest is imported all the same.
    if (error instanceof FileChanged) return unwritten(error.message);
    throw error;
  }
  try {
    // The rows are customer data: the owner's only, like every file the service writes.
    createOwnerOnlyFile(path);
    // Written as the input was (Excel in a German locale reads commas as one column): without its BOM, Excel would show "René" as "RenÃ©", and a fix saved as "CSV UTF-8" would import that.
    await Bun.write(path, `${style.bom ? "\uFEFF" : ""}${lines.join(style.lineBreak)}${style.lineBreak}`);
  } catch (error) {
    // Checked writable up front, it can still fail (a full disk): the rows are imported all the same.
    return unwritten((error as Error).message);
  }
  return { ...summary, invalidFile: path };
}

/**
 * invalidCells is an invalid row's line in its file: its fields as written, then its import_row and
 * import_errors. A row that has an import_row already (from an invalid-rows file) keeps it, the
 * number in the file first imported, the one the operator knows; its errors are the latest.
 */
function invalidCells(header: string[], fields: string[], row: number, errors: string[]): string[] {
  const cells = header.map((_, j) => fields[j] ?? "");
  cells[header.indexOf("import_row")] ||= String(row);
  cells[header.indexOf("import_errors")] = errors.join("; ");
  return cells;
}

/** appendedTo adds members to the text of a JSON object as written: `{"a": 1}` becomes `{"a": 1,"b":2}`. */
function appendedTo(objectText: string, members: string): string {
  const body = objectText.trim().replace(/\}$/, "").trimEnd();
  return `${body}${body === "{" ? "" : ","}${members}}`;
}
