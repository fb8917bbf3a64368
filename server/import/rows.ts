import { closeSync, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { nameKey } from "../shared/text.ts";
import { storedText } from "../contacts/model.ts";
import { hostName } from "../shared/domains.ts";
import { ConfigError } from "../config.ts";
import { isForbiddenKey, parseSafeJson } from "../http/safe-json.ts";
import { MAX_IMPORT_RECORD_LENGTH } from "../limits/limits.ts";
import { ProblemError, type FieldError } from "../shared/problem.ts";
import { printable } from "../shared/text.ts";
import { CsvError, csvRecords, separatorOf, type Separator } from "./csv.ts";

// From a file's rows to API items: which column feeds which contact or account field.

/** SourceRow is one record of the input file: its 1-based number (header excluded) and its values by column. */
export interface SourceRow {
  row: number;
  values: Record<string, unknown>;
  /** the JSON Lines object as written, less the importer's own members (values flattens its nested objects) */
  original?: Record<string, unknown>;
  /** the CSV record as written, by position: values cannot tell apart columns with blank names */
  fields?: string[];
  /**
   * why the row is refused whatever it holds: a JSON Lines line the API would refuse in any body (an
   * integer past 2^53, a NUL, a duplicate key ...), with the line as written less the importer's own
   * members (IMPORTER_COLUMNS), or a CSV record with fewer fields than the header
   */
  refused?: { line?: string; errors: FieldError[] };
  /** a JSON Lines line's first import_row as written, from the invalid-rows file it comes from */
  importRow?: string;
}

/** IMPORTER_COLUMNS are the columns the importer adds to an invalid-rows file; that file imported again, they are its own, not the rows'. */
export const IMPORTER_COLUMNS = ["import_row", "import_errors"];

/**
 * SourceFile is a checked input file: its columns in order, how many rows it has, and its rows,
 * read again from the file on each call, one at a time: a large file is never held in memory.
 */
export interface SourceFile {
  format: "csv" | "jsonl";
  /** how many CSV records hold only empty cells (",,,", as spreadsheets write an emptied row): skipped, not rows */
  skipped: number;
  /** how a CSV file is written, so its invalid rows are written alike: Excel reads a CSV without a BOM as Windows-1252 */
  style?: CsvStyle;
  columns: string[];
  rowCount: number;
  rows(): Iterable<SourceRow>;
}

/** CsvStyle is how a CSV file is written: whether it starts with a UTF-8 BOM, its separator and its line break (its first one). */
export interface CsvStyle {
  bom: boolean;
  separator: Separator;
  lineBreak: string;
}

/** csvStyle reads a CSV file's style from its first piece of text. */
function csvStyle(start: string): CsvStyle {
  return { bom: start.charCodeAt(0) === 0xfeff, separator: separatorOf(start), lineBreak: /\r\n|\n|\r/.exec(start)?.[0] ?? "\n" };
}

/** firstPiece is the first piece of a file's text ("" for an empty file), read alone. */
function firstPiece(read: () => Iterable<string>): string {
  const iterator = read()[Symbol.iterator]();
  try {
    const first = iterator.next();
    return first.done ? "" : first.value;
  } finally {
    iterator.return?.();
  }
}

/** CHUNK_BYTES is how much of the input file is read at a time. */
const CHUNK_BYTES = 1 << 20;

/** SAVE_AS_UTF8 is what to do with a file that is not UTF-8. */
const SAVE_AS_UTF8 = 'save the file as UTF-8 (in Excel: "CSV UTF-8") and run the import again';

/** UTF16_SNIFF_BYTES is how much of a file's start tells UTF-16 text by its NULs. */
const UTF16_SNIFF_BYTES = 64;

/**
 * looksUtf16 tells whether a file's first bytes are UTF-16 (Excel's "Unicode Text"): a byte order
 * mark, or a NUL in every other byte, which is what its ASCII characters are in either byte order.
 * Without a mark it is valid UTF-8, read as column names full of NULs that map to nothing.
 */
function looksUtf16(start: Uint8Array): boolean {
  if ((start[0] === 0xff && start[1] === 0xfe) || (start[0] === 0xfe && start[1] === 0xff)) return true;
  const units = Math.floor(Math.min(start.length, UTF16_SNIFF_BYTES) / 2);
  const nulEvery = (offset: number) => Array.from({ length: units }, (_, i) => start[2 * i + offset]).every((byte) => byte === 0);
  return units >= 2 && nulEvery(0) !== nulEvery(1);
}

/** FileChanged stops the reading of a file that is not the file its first read found: what was read before and after would not match. */
export class FileChanged extends ConfigError {}

/**
 * sameInodeSizeAndTime is a check for textPieces that a file stays the one the first check saw:
 * the same inode (not replaced), size and modification time (not written to). The import reads
 * its file once per pass; an export job still writing it, or a sync replacing it, between the
 * passes sent contacts whose accounts the earlier pass never saw, without their account.
 */
export function sameInodeSizeAndTime(path: string): (fd: number) => void {
  let first: string | undefined;
  return (fd) => {
    const stats = fstatSync(fd, { bigint: true });
    const identity = `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}`;
    first ??= identity;
    if (identity !== first) throw new FileChanged(`${path} changed while the import read it (its inode, size or modification time is not what its first read found)`);
  };
}

/**
 * textPieces reads a file as UTF-8 text a piece at a time, so the whole file is never in memory,
 * and stops at the first bytes that are not UTF-8: a file saved as Windows-1252 (Excel's plain
 * "CSV") would otherwise import "José" as "Jos\uFFFD". A UTF-16 file is refused as such at once.
 * `unchanged` (sameInodeSizeAndTime) checks the file when it is opened and after each piece is read.
 */
export function* textPieces(path: string, unchanged: (fd: number) => void): Generator<string> {
  const cannotRead = (error: Error) => new ConfigError(`import: cannot read ${path}: ${error.message}`);
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (error) {
    throw cannotRead(error as Error);
  }
  try {
    unchanged(fd);
    const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
    const buffer = new Uint8Array(CHUNK_BYTES);
    let first = true;
    for (;;) {
      let read: number;
      try {
        read = readSync(fd, buffer, 0, CHUNK_BYTES, null);
      } catch (error) {
        throw cannotRead(error as Error);
      }
      unchanged(fd);
      if (first && looksUtf16(buffer.subarray(0, read))) throw new ConfigError(`${path} is UTF-16, not UTF-8; ${SAVE_AS_UTF8}`);
      first = false;
      let piece: string;
      try {
        piece = decoder.decode(buffer.subarray(0, read), { stream: read > 0 });
      } catch {
        throw notUtf8(path);
      }
      if (piece !== "") yield piece;
      if (read === 0) return;
    }
  } finally {
    closeSync(fd);
  }
}

/** notUtf8 names the line of the file's first bytes that are not UTF-8 (read whole: this is the error's path only). */
function notUtf8(path: string): ConfigError {
  const bytes = readFileSync(path);
  const bad = firstInvalidByte(bytes);
  const line = bytes.subarray(0, bad).filter((byte) => byte === 0x0a).length + 1;
  return new ConfigError(`${path}: line ${line} is not UTF-8; ${SAVE_AS_UTF8}`);
}

/**
 * firstInvalidByte finds, by halving, the shortest start of `bytes` that is not UTF-8 (a sequence
 * cut at the end is not counted), so a file that holds a real U+FFFD before it is not misread.
 */
function firstInvalidByte(bytes: Uint8Array): number {
  const valid = (length: number) => {
    try {
      new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes.subarray(0, length), { stream: true });
      return true;
    } catch {
      return false;
    }
  };
  let [low, high] = [0, bytes.length];
  while (low < high) {
    const middle = Math.floor((low + high) / 2);
    if (valid(middle + 1)) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * readSourceFile checks a CSV file (first record is the header) or a JSON Lines file (one object
 * per line; nested objects become `key.sub` columns) whole, so a malformed one stops the import
 * before anything is sent, and returns its rows to read.
 */
export function readSourceFile(path: string, read: () => Iterable<string>): SourceFile {
  if (/\.jsonl$|\.ndjson$/i.test(path)) return readJsonLines(path, read);
  if (!/\.csv$/i.test(path)) throw new ConfigError(`import reads .csv or .jsonl files; ${path} is neither`);
  const style = csvStyle(firstPiece(read));
  const records = function* () {
    try {
      yield* csvRecords(read(), style.separator);
    } catch (error) {
      if (error instanceof CsvError) throw new ConfigError(`${path}: ${error.message}`);
      throw error;
    }
  };
  const checked = records();
  const header = checked.next();
  if (header.done) throw new ConfigError(`${path} is empty: the first line must name the columns`);
  const columns = header.value.fields.map((c) => c.trim());
  // Each row's values are keyed by column name, so a second column of the same name would silently
  // replace the first one's data. Blank names are left alone: they are never mapped, and
  // spreadsheets often export trailing empty columns.
  const repeated = columns.findIndex((c, i) => c !== "" && columns.indexOf(c) !== i);
  if (repeated >= 0) throw new ConfigError(`${path}: the header names the column ${printable(JSON.stringify(columns[repeated]))} twice (columns ${columns.indexOf(columns[repeated]!) + 1} and ${repeated + 1}); rename one`);
  let rowCount = 0;
  let skipped = 0;
  for (const { fields, line } of checked) {
    if (emptyCells(fields)) {
      skipped++;
      continue;
    }
    rowCount++;
    if (fields.length > columns.length) throw new ConfigError(`${path}: line ${line} (data row ${rowCount}) has ${fields.length} fields but the header names ${columns.length} columns`);
  }
  function* rows(): Generator<SourceRow> {
    let row = 0;
    const again = records();
    again.next();
    for (const { fields } of again) {
      if (emptyCells(fields)) continue;
      // Padded with empty cells, such a record (a line break outside quotes cuts one in two) was imported as two people, each part in the wrong columns.
      const refused = fields.length < columns.length ? { errors: [{ pointer: "", detail: `has ${fields.length} fields where the header names ${columns.length} columns: a line break outside quotes, or cells left out` }] } : undefined;
      yield { row: ++row, values: Object.fromEntries(columns.map((c, j) => [c, fields[j] ?? ""])), fields, ...(refused ? { refused } : {}) };
    }
  }
  return { format: "csv", skipped, style, columns, rowCount, rows };
}

/** emptyCells tells a record of empty cells only: an emptied spreadsheet row, which names nobody and would be an invalid row. */
const emptyCells = (fields: string[]) => fields.every((field) => field.trim() === "");

/**
 * jsonLines yields each non-blank line of JSON Lines text, given in pieces of any size, with its
 * 1-based line number; a line longer than MAX_IMPORT_RECORD_LENGTH stops it (held whole until it
 * ends, a line without its line break would take in the rest of the file).
 */
function* jsonLines(path: string, pieces: Iterable<string>): Generator<{ line: string; number: number }> {
  let rest = "";
  let number = 0;
  const tooLong = () => new ConfigError(`${path}: line ${number + 1} is longer than ${MAX_IMPORT_RECORD_LENGTH} characters, more than any row can import`);
  const lineOf = (text: string) => {
    if (text.length > MAX_IMPORT_RECORD_LENGTH) throw tooLong();
    number++;
    const line = text.endsWith("\r") ? text.slice(0, -1) : text;
    return line.trim() === "" ? null : { line, number };
  };
  for (const piece of pieces) {
    const text = number === 0 && rest === "" && piece.charCodeAt(0) === 0xfeff ? piece.slice(1) : rest + piece;
    let start = 0;
    for (let newline = text.indexOf("\n"); newline >= 0; newline = text.indexOf("\n", start)) {
      const found = lineOf(text.slice(start, newline));
      if (found) yield found;
      start = newline + 1;
    }
    rest = text.slice(start);
    if (rest.length > MAX_IMPORT_RECORD_LENGTH) throw tooLong();
  }
  const last = lineOf(rest);
  if (last) yield last;
}

/** jsonObject parses one line of a JSON Lines file, refusing one that is not JSON or not an object. */
function jsonObject(path: string, line: string, number: number): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (error) {
    throw new ConfigError(`${path}: line ${number} is not JSON (${(error as Error).message})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new ConfigError(`${path}: line ${number} is not a JSON object`);
  return value as Record<string, unknown>;
}

/** flattened turns nested objects into `key.sub` values. */
function flattened(value: Record<string, unknown>): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    if (typeof v === "object" && v !== null && !Array.isArray(v)) for (const [sub, w] of Object.entries(v)) values[`${key}.${sub}`] = w;
    else values[key] = v;
  }
  return values;
}

/** Member is a member of a JSON object's text: its key, and where it starts, its value starts and it ends. */
interface Member {
  key: string;
  start: number;
  valueStart: number;
  end: number;
}

/** topMembers finds the members of the text of a JSON object (valid JSON: JSON.parse took it), nested ones skipped. */
function topMembers(text: string): Member[] {
  const members: Member[] = [];
  let i = text.indexOf("{") + 1;
  const space = () => {
    while (" \t\r\n".includes(text[i]!)) i++;
  };
  const string = () => {
    for (i++; text[i] !== '"'; i += text[i] === "\\" ? 2 : 1);
    i++;
  };
  for (;;) {
    space();
    if (text[i] === "}") return members;
    const start = i;
    string();
    const key = JSON.parse(text.slice(start, i)) as string;
    space();
    i++;
    space();
    const valueStart = i;
    for (let depth = 0; depth > 0 || (text[i] !== "," && text[i] !== "}"); ) {
      if (text[i] === '"') {
        string();
        continue;
      }
      if (text[i] === "{" || text[i] === "[") depth++;
      else if (text[i] === "}" || text[i] === "]") depth--;
      i++;
    }
    let end = i;
    while (" \t\r\n".includes(text[end - 1]!)) end--;
    members.push({ key, start, valueStart, end });
    if (text[i] === ",") i++;
  }
}

/**
 * withoutImporterMembers is a JSON Lines line as written less its import_row and import_errors
 * members (IMPORTER_COLUMNS), with the first import_row's value as written. An invalid-rows file
 * imported again must be judged on its rows alone: a line that an older crm gave those members
 * twice was refused for the duplicate key, and a refused line was written with them added again.
 */
function withoutImporterMembers(line: string): { line: string; importRow?: string } {
  const members = topMembers(line);
  const kept = members.filter((member) => !IMPORTER_COLUMNS.includes(member.key));
  if (kept.length === members.length) return { line };
  const first = members.find((member) => member.key === "import_row");
  // Each kept member keeps the separator that followed it, so the rest stays as written.
  const text = kept.map((member, k) => line.slice(member.start, k < kept.length - 1 ? members[members.indexOf(member) + 1]!.start : member.end)).join("");
  return { line: `${line.slice(0, members[0]!.start)}${text}${line.slice(members.at(-1)!.end)}`, ...(first ? { importRow: line.slice(first.valueStart, first.end) } : {}) };
}

function readJsonLines(path: string, read: () => Iterable<string>): SourceFile {
  const columns = new Set<string>();
  let rowCount = 0;
  for (const { line, number } of jsonLines(path, read())) {
    for (const key of Object.keys(flattened(jsonObject(path, line, number)))) columns.add(key);
    rowCount++;
  }
  if (rowCount === 0) throw new ConfigError(`${path} is empty: each line must be a JSON object`);
  function* rows(): Generator<SourceRow> {
    let row = 0;
    for (const { line, number } of jsonLines(path, read())) {
      const own = withoutImporterMembers(line);
      const original = jsonObject(path, own.line, number);
      let refused: SourceRow["refused"];
      try {
        // JSON.parse rounds an id past 2^53 (two people become one) and keeps the last of two equal
        // keys; the API refuses those and a NUL in any body, so the row is refused, not the batch.
        parseSafeJson(own.line);
      } catch (error) {
        if (!(error instanceof ProblemError)) throw error;
        refused = { line: own.line, errors: error.errors ?? [{ pointer: "", detail: error.message }] };
      }
      yield { row: ++row, values: flattened(original), original, ...(refused ? { refused } : {}), ...(own.importRow !== undefined ? { importRow: own.importRow } : {}) };
    }
  }
  return { format: "jsonl", skipped: 0, columns: [...columns], rowCount, rows };
}

const CONTACT_TARGETS = ["email", "first_name", "last_name", "phone", "external_id", "tags"] as const;
const ACCOUNT_TARGETS = ["account.name", "account.domain"] as const;
/** A target is a contact field, an account field, `custom_fields.KEY`, or `-` (ignore the column). */
type Target = string;

// Usual spellings of each field in exported spreadsheets, compared without case, spaces or punctuation.
// A Map, not an object literal: a column named "Constructor" or "toString" must not find Object.prototype's.
const USUAL_HEADERS = new Map<string, Target>(Object.entries({
  email: "email", emailaddress: "email", mail: "email", workemail: "email",
  firstname: "first_name", givenname: "first_name", forename: "first_name", first: "first_name",
  lastname: "last_name", surname: "last_name", familyname: "last_name", last: "last_name",
  phone: "phone", phonenumber: "phone", mobile: "phone", mobilephone: "phone", telephone: "phone", tel: "phone",
  externalid: "external_id", id: "external_id", sourceid: "external_id", contactid: "external_id", recordid: "external_id",
  tags: "tags", labels: "tags",
  company: "account.name", companyname: "account.name", account: "account.name", accountname: "account.name", organization: "account.name", organisation: "account.name",
  domain: "account.domain", companydomain: "account.domain", accountdomain: "account.domain", website: "account.domain", companywebsite: "account.domain", websiteurl: "account.domain",
} satisfies Record<string, Target>));

const squash = (header: string) => header.toLowerCase().replace(/[^a-z0-9]/g, "");

/**
 * prefixedTarget maps a header that names its record first: "Contact Email" to email, "Account
 * Website" to account.domain, and Pipedrive's "Person - Email - Work" (a qualifier after the
 * field is dropped) and "Organization - Website" alike. The prefix keeps to its record: "Account
 * ID" or "Account Phone" is the account's, not the contact's external_id or phone, so it is
 * ignored (external ids of different contacts would otherwise make them one); a contact's
 * company ("Person - Organization") is its account's name.
 */
function prefixedTarget(column: string): Target | undefined {
  const prefixed = /^(contact|person|account|organi[sz]ation|company)\W*(.+?)(\W+(work|home|mobile|other))?$/i.exec(column);
  if (!prefixed) return undefined;
  const target = USUAL_HEADERS.get(squash(prefixed[2]!));
  const ofAccount = !/^(contact|person)$/i.test(prefixed[1]!);
  return target && (target.startsWith("account.") === ofAccount || (!ofAccount && target === "account.name")) ? target : undefined;
}

/**
 * customFieldTarget is `custom_fields.KEY` for a column or --map field naming a custom field the
 * API accepts, else undefined: a key the API refuses anywhere in a body would fail every batch.
 */
function customFieldTarget(text: string): Target | undefined {
  const match = /^custom_fields\.([^.]+)$/i.exec(text);
  return match && !isForbiddenKey(match[1]!) ? `custom_fields.${match[1]}` : undefined;
}

function validTarget(target: string): boolean {
  return target === "-" || (CONTACT_TARGETS as readonly string[]).includes(target) || (ACCOUNT_TARGETS as readonly string[]).includes(target) || (target.startsWith("custom_fields.") && customFieldTarget(target) !== undefined);
}

/** ColumnMap says which column feeds which field. */
export type ColumnMap = Map<string, Target>;

/**
 * columnMap maps each column: `--map "Email=email,Company=account.name,Plan=custom_fields.plan,Notes=-"`
 * first, then the usual headers (Email, First name, Company, ...); other columns are ignored.
 */
export function columnMap(columns: string[], mapText: string | undefined): { map: ColumnMap; ignored: string[] } {
  const explicit = new Map<string, Target>();
  for (const pair of (mapText ?? "").split(",").filter((p) => p.trim() !== "")) {
    const eq = pair.lastIndexOf("=");
    const column = pair.slice(0, eq).trim();
    const target = pair.slice(eq + 1).trim();
    if (eq < 0 || column === "" || !validTarget(target)) {
      throw new ConfigError(`--map: ${printable(JSON.stringify(pair))} is not COLUMN=FIELD with FIELD one of ${[...CONTACT_TARGETS, ...ACCOUNT_TARGETS].join(", ")}, custom_fields.KEY (KEY not __proto__, constructor or prototype) or -`);
    }
    if (!columns.includes(column)) throw new ConfigError(`--map: the file has no column ${printable(JSON.stringify(column))} (columns: ${columns.map(printable).join(", ")})`);
    const rival = [...explicit].find(([other, field]) => field === target && target !== "-" && other !== column);
    if (rival) throw new ConfigError(`--map: the columns ${printable(JSON.stringify(rival[0]))} and ${printable(JSON.stringify(column))} both map to ${printable(target)}; a field takes one column`);
    explicit.set(column, target);
  }
  const map: ColumnMap = new Map();
  const ignored: string[] = [];
  const taken = new Set(explicit.values());
  for (const column of columns) {
    const given = explicit.get(column);
    const usual = /^custom_fields\./i.test(column) ? customFieldTarget(column) : USUAL_HEADERS.get(squash(column)) ?? prefixedTarget(column);
    const target = given ?? (usual && !taken.has(usual) ? usual : undefined);
    if (target && target !== "-") {
      map.set(column, target);
      taken.add(target);
    } else ignored.push(column);
  }
  return { map, ignored };
}

/** ImportRow is a source row turned into the contact and account items the API takes. */
export interface ImportRow {
  row: number;
  contact: Record<string, unknown>;
  account: { name: string; domain?: string } | null;
  /** the website cell as written when it names no host (bareDomain): read as no website, and the import says so */
  notDomain?: string;
  /** the company cell as written when it is a placeholder (PLACEHOLDER): read as no company, and the import says so */
  noCompany?: string;
  /** errors that make the row invalid before it is sent (SourceRow.refused) */
  refusal?: FieldError[];
}

const text = (value: unknown) => (typeof value === "string" ? value.trim() : value === null || value === undefined ? "" : String(value));

/**
 * PLACEHOLDER matches what spreadsheets write where a value is missing: a company's website, or the
 * company itself. Read as a domain ("N/A" becomes "n") or a name, it would make every row so marked
 * one account, grouping strangers as colleagues.
 */
const PLACEHOLDER = /^(n\/?a|none|null|nil|unknown|tbd|-+|\?+)$/i;

/**
 * bareDomain turns a website into a domain as the API stores it (https://www.Acme.com:443/about ->
 * www.acme.com, https://www.müller.de -> www.xn--mller-kva.de), "" for a placeholder (PLACEHOLDER),
 * null for a value that names no host (hostName: "...", "acme .com", "kein"). Such a value is a
 * spreadsheet's "none" or a typo: sent, it failed the whole row over a field the company's name
 * stands in for; taken as a domain (dots alone were), it made every company so marked one.
 */
function bareDomain(value: string): string | null {
  if (PLACEHOLDER.test(value)) return "";
  const host = value.replace(/^[a-z][a-z0-9+.-]*:\/\//i, "").replace(/[/?#].*$/, "").replace(/:\d*$/, "");
  return hostName(host);
}

/** toImportRow builds the items of one row; empty cells are left out (they neither set nor clear a field). */
export function toImportRow(source: SourceRow, map: ColumnMap): ImportRow {
  const contact: Record<string, unknown> = {};
  const account: { name?: string; domain?: string } = {};
  let notDomain: string | undefined;
  let noCompany: string | undefined;
  for (const [column, target] of map) {
    const raw = source.values[column];
    if (raw === undefined || raw === null || text(raw) === "") continue;
    // A cell listing a tag twice ("vip; vip") means the tag once; the API refuses a repeated one.
    if (target === "tags") contact.tags = Array.isArray(raw) ? raw : [...new Set(text(raw).split(/[;|,]/).map((t) => t.trim()).filter((t) => t !== ""))];
    else if (target.startsWith("custom_fields.")) ((contact.custom_fields ??= {}) as Record<string, unknown>)[target.slice("custom_fields.".length)] = typeof raw === "string" ? raw.trim() : raw;
    else if (target === "account.name") {
      if (PLACEHOLDER.test(text(raw))) noCompany = text(raw);
      else account.name = text(raw);
    }
    else if (target === "account.domain") {
      const domain = bareDomain(text(raw));
      if (domain === null) notDomain = text(raw);
      account.domain = domain || undefined;
    }
    else contact[target] = text(raw);
  }
  // The form the server stores, in which it counts the limits: the row is checked here as sent.
  storedText(contact);
  const name = account.name ?? account.domain;
  return {
    row: source.row,
    contact,
    account: name ? { name, ...(account.domain ? { domain: account.domain } : {}) } : null,
    ...(notDomain !== undefined ? { notDomain } : {}),
    ...(noCompany !== undefined ? { noCompany } : {}),
    ...(source.refused ? { refusal: source.refused.errors } : {}),
  };
}

/** accountKey is how the importer groups rows by account: the domain when there is one, else the name as the API compares it. */
export function accountKey(account: { name: string; domain?: string }): string {
  return account.domain ? `domain:${account.domain}` : `name:${nameKey(account.name)}`;
}

/** columnOf names the column that feeds a field of the item, for error messages (`/email` -> "E-mail"). */
export function columnOf(map: ColumnMap, pointer: string): string {
  const field = pointer.replace(/^\//, "").split("/");
  const target = field[0] === "custom_fields" && field[1] ? `custom_fields.${field[1]}` : field[0] === "account" ? `account.${field[1]}` : field[0]!;
  for (const [column, t] of map) if (t === target) return column;
  return pointer;
}
