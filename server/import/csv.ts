// RFC 4180 CSV, as spreadsheets write it: comma-separated (or, as Excel writes "CSV" in locales
// whose decimal mark is a comma, semicolon-separated; or tab-separated), fields quoted with " when
// they hold the separator, quotes (doubled) or line breaks; CRLF or LF between records; an optional UTF-8 BOM.

import { MAX_IMPORT_RECORD_LENGTH } from "../limits/limits.ts";

/** CsvError is a malformed file, with the 1-based line where the problem starts. */
export class CsvError extends Error {
  constructor(readonly line: number, message: string) {
    super(`line ${line}: ${message}`);
  }
}

/** CsvRecord is one record of a CSV text and the 1-based line it starts on (a quoted field may span lines). */
export interface CsvRecord {
  fields: string[];
  line: number;
}

/** recordTooLong refuses a record longer than MAX_IMPORT_RECORD_LENGTH, at the line it starts on. */
const recordTooLong = (line: number) => new CsvError(line, `a record longer than ${MAX_IMPORT_RECORD_LENGTH} characters, more than any row can import (a quoted field never closed?)`);

const QUOTE = 0x22;
const LF = 0x0a;
const CR = 0x0d;

/** SEPARATORS are the separators a CSV file may use, by name: a comma, or the semicolon or tab of a header that has no comma (separatorOf). */
export const SEPARATORS = { ",": "comma", ";": "semicolon", "\t": "tab" } as const;
export type Separator = keyof typeof SEPARATORS;

/**
 * separatorOf tells a CSV text's separator from its first line (its header, outside quotes): a
 * comma if it has one, else the semicolon or tab it has more of, else a comma (one column).
 * Read with commas, a semicolon-separated file is one column whose rows are all invalid.
 */
export function separatorOf(text: string): Separator {
  const counts = { ",": 0, ";": 0, "\t": 0 };
  let quoted = false;
  for (const ch of text) {
    if (ch === '"') quoted = !quoted;
    else if (!quoted && (ch === "\n" || ch === "\r")) break;
    else if (!quoted && ch in counts) counts[ch as Separator]++;
  }
  if (counts[","] > 0 || counts[";"] + counts["\t"] === 0) return ",";
  return counts[";"] >= counts["\t"] ? ";" : "\t";
}

/**
 * csvRecords reads CSV text, given in pieces of any size (a file read a piece at a time), one
 * record at a time; blank lines are skipped, a BOM is ignored. Only the record being read is
 * held, and each field is a slice of the text, not built a character at a time.
 */
export function* csvRecords(pieces: Iterable<string>, separator: Separator = ","): Generator<CsvRecord> {
  const sep = separator.charCodeAt(0);
  let text = "";
  let i = 0;
  let line = 1;
  let final = false;
  const iterator = pieces[Symbol.iterator]();
  try {
    for (;;) {
      const read = i < text.length || final ? readRecord(text, i, line, final, sep) : null;
      if (read) {
        if (read.next - i > MAX_IMPORT_RECORD_LENGTH) throw recordTooLong(line);
        ({ next: i, line } = read);
        if (read.record) yield read.record;
        if (final && i >= text.length) return;
        continue;
      }
      if (final) return;
      // Held whole until it ends, a record past the bound (a quote never closed) would take in the rest of the file.
      if (text.length - i > MAX_IMPORT_RECORD_LENGTH) throw recordTooLong(line);
      // The record is cut by the end of the piece: read on from its start with the next piece.
      const piece = iterator.next();
      if (piece.done) {
        final = true;
      } else {
        text = text.length === 0 && line === 1 && piece.value.charCodeAt(0) === 0xfeff ? piece.value.slice(1) : text.slice(i) + piece.value;
        i = 0;
      }
    }
  } finally {
    iterator.return?.();
  }
}

/**
 * readRecord reads the record starting at `start` of `text`, its fields separated by `sep`: the record (null for a blank line),
 * where the next one starts and its line. Unless `final` (no more text follows), null when the
 * text ends before the record does, or before the character that tells where it ends.
 */
function readRecord(text: string, start: number, startLine: number, final: boolean, sep: number): { record: CsvRecord | null; next: number; line: number } | null {
  const end = text.length;
  const record: CsvRecord = { fields: [], line: startLine };
  let line = startLine;
  let i = start;
  // A line holding only a line break is blank; one holding a separator or a quoted "" is a record.
  let written = false;
  for (;;) {
    if (text.charCodeAt(i) === QUOTE) {
      const quoteLine = line;
      let value = "";
      let from = i + 1;
      let k = from;
      for (;;) {
        if (k >= end) {
          if (!final) return null;
          throw new CsvError(quoteLine, "a quoted field is never closed");
        }
        const ch = text.charCodeAt(k);
        if (k + 1 >= end && !final && (ch === QUOTE || ch === CR)) return null;
        if (ch === QUOTE) {
          value += text.slice(from, k);
          if (text.charCodeAt(k + 1) !== QUOTE) break;
          value += '"';
          k += 2;
          from = k;
          continue;
        }
        if (ch === LF || (ch === CR && text.charCodeAt(k + 1) !== LF)) line++;
        k++;
      }
      i = k + 1;
      if (i < end && text.charCodeAt(i) !== sep && text.charCodeAt(i) !== LF && text.charCodeAt(i) !== CR) {
        throw new CsvError(line, `a closing quote must end its field (found ${JSON.stringify(text[i])} after it)`);
      }
      record.fields.push(value);
      written = true;
    } else {
      let k = i;
      for (let ch = text.charCodeAt(k); k < end && ch !== sep && ch !== LF && ch !== CR; ch = text.charCodeAt(++k)) {
        if (ch === QUOTE) throw new CsvError(line, "a quote inside an unquoted field; quote the whole field and double the quote");
      }
      if (k >= end && !final) return null;
      record.fields.push(text.slice(i, k));
      written ||= k > i;
      i = k;
    }
    if (i >= end) break;
    if (text.charCodeAt(i) === sep) {
      i++;
      written = true;
      continue;
    }
    if (text.charCodeAt(i) === CR && i + 1 >= end && !final) return null;
    i += text.charCodeAt(i) === CR && text.charCodeAt(i + 1) === LF ? 2 : 1;
    line++;
    break;
  }
  return { record: written ? record : null, next: i, line };
}

/** parseCsv reads a whole CSV text into records of fields (csvRecords, collected). */
export function parseCsv(text: string): string[][] {
  return Array.from(csvRecords([text]), (record) => record.fields);
}

/** csvLine renders one record as a CSV line (CRLF-free; quoted where needed). */
export function csvLine(fields: string[], separator: Separator = ","): string {
  // A comma too, whatever the separator: a header holding one outside quotes is read again as comma-separated (separatorOf).
  return fields.map((f) => (f.includes(separator) || /[",\r\n]|^\s|\s$/.test(f) ? `"${f.replaceAll('"', '""')}"` : f)).join(separator);
}
