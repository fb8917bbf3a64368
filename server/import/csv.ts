// RFC 4180 CSV, as spreadsheets write it: comma-separated, fields quoted with " when they hold
// commas, quotes (doubled) or line breaks; CRLF or LF between records; an optional UTF-8 BOM.

/** CsvError is a malformed file, with the 1-based line where the problem starts. */
export class CsvError extends Error {
  constructor(readonly line: number, message: string) {
    super(`line ${line}: ${message}`);
  }
}

/**
 * parseCsv splits CSV text into records of fields; blank lines are skipped, a BOM is ignored.
 * `startLines`, when given, receives the 1-based line each record starts on (a quoted field may
 * span lines), so a message can name the line a spreadsheet shows.
 */
export function parseCsv(text: string, startLines?: number[]): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = "";
  let quoted = false;
  let fieldStarted = false;
  let line = 1;
  let quoteLine = 1;
  let recordLine = 1;
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  const endRecord = () => {
    record.push(field);
    if (record.length > 1 || record[0] !== "" || fieldStarted) {
      records.push(record);
      startLines?.push(recordLine);
    }
    record = [];
    field = "";
    fieldStarted = false;
  };
  for (; i < text.length; i++) {
    const ch = text[i]!;
    if (quoted) {
      if (ch === '"') {
        if (text[i + 1] === '"') {
          field += '"';
          i++;
        } else {
          quoted = false;
          const next = text[i + 1];
          if (next !== undefined && next !== "," && next !== "\n" && next !== "\r") throw new CsvError(line, `a closing quote must end its field (found ${JSON.stringify(next)} after it)`);
        }
      } else {
        if (ch === "\n" || (ch === "\r" && text[i + 1] !== "\n")) line++;
        field += ch;
      }
      continue;
    }
    if (ch === '"') {
      if (field !== "") throw new CsvError(line, "a quote inside an unquoted field; quote the whole field and double the quote");
      quoted = true;
      fieldStarted = true;
      quoteLine = line;
    } else if (ch === ",") {
      record.push(field);
      field = "";
      fieldStarted = true;
    } else if (ch === "\n" || ch === "\r") {
      if (ch === "\r" && text[i + 1] === "\n") i++;
      endRecord();
      line++;
      recordLine = line;
    } else {
      field += ch;
    }
  }
  if (quoted) throw new CsvError(quoteLine, "a quoted field is never closed");
  if (field !== "" || record.length > 0 || fieldStarted) endRecord();
  return records;
}

/** csvLine renders one record as a CSV line (CRLF-free; quoted where needed). */
export function csvLine(fields: string[]): string {
  return fields.map((f) => (/[",\r\n]|^\s|\s$/.test(f) ? `"${f.replaceAll('"', '""')}"` : f)).join(",");
}
