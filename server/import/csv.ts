// RFC 4180 CSV, as spreadsheets write it: comma-separated, fields quoted with " when they hold
// commas, quotes (doubled) or line breaks; CRLF or LF between records; an optional UTF-8 BOM.

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
const COMMA = 0x2c;
const LF = 0x0a;
const CR = 0x0d;

/**
 * csvRecords reads CSV text, given in pieces of any size (a file read a piece at a time), one
 * record at a time; blank lines are skipped, a BOM is ignored. Only the record being read is
 * held, and each field is a slice of the text, not built a character at a time.
 */
export function* csvRecords(pieces: Iterable<string>): Generator<CsvRecord> {
  let text = "";
  let i = 0;
  let line = 1;
  let final = false;
  const iterator = pieces[Symbol.iterator]();
  try {
    for (;;) {
      const read = i < text.length || final ? readRecord(text, i, line, final) : null;
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
 * readRecord reads the record starting at `start` of `text`: the record (null for a blank line),
 * where the next one starts and its line. Unless `final` (no more text follows), null when the
 * text ends before the record does, or before the character that tells where it ends.
 */
function readRecord(text: string, start: number, startLine: number, final: boolean): { record: CsvRecord | null; next: number; line: number } | null {
  const end = text.length;
  const record: CsvRecord = { fields: [], line: startLine };
  let line = startLine;
  let i = start;
  // A line holding only a line break is blank; one holding a comma or a quoted "" is a record.
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
      if (i < end && text.charCodeAt(i) !== COMMA && text.charCodeAt(i) !== LF && text.charCodeAt(i) !== CR) {
        throw new CsvError(line, `a closing quote must end its field (found ${JSON.stringify(text[i])} after it)`);
      }
      record.fields.push(value);
      written = true;
    } else {
      let k = i;
      for (let ch = text.charCodeAt(k); k < end && ch !== COMMA && ch !== LF && ch !== CR; ch = text.charCodeAt(++k)) {
        if (ch === QUOTE) throw new CsvError(line, "a quote inside an unquoted field; quote the whole field and double the quote");
      }
      if (k >= end && !final) return null;
      record.fields.push(text.slice(i, k));
      written ||= k > i;
      i = k;
    }
    if (i >= end) break;
    if (text.charCodeAt(i) === COMMA) {
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
export function csvLine(fields: string[]): string {
  return fields.map((f) => (/[",\r\n]|^\s|\s$/.test(f) ? `"${f.replaceAll('"', '""')}"` : f)).join(",");
}
