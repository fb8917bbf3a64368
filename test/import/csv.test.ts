import { describe, expect, test } from "bun:test";
import { CsvError, csvLine, csvRecords, parseCsv, separatorOf } from "../../server/import/csv.ts";
import { ConfigError } from "../../server/config.ts";
import { columnMap, readSourceFile, toImportRow } from "../../server/import/rows.ts";
import { MAX_IMPORT_RECORD_LENGTH } from "../../server/limits/limits.ts";

describe("CSV: happy paths", () => {
  test("quoted fields keep commas, doubled quotes and line breaks; CRLF or LF; a BOM is dropped; blank lines skipped", () => {
    const text = '\uFEFFEmail,Name,Notes\r\na@example.com,"Lovelace, Ada","said ""hi""\r\nthen left"\r\n\r\nb@example.com,,\n"",x,""\n';
    expect(parseCsv(text)).toEqual([
      ["Email", "Name", "Notes"],
      ["a@example.com", "Lovelace, Ada", 'said "hi"\r\nthen left'],
      ["b@example.com", "", ""],
      ["", "x", ""],
    ]);
  });

  test("a last record without a line break, and unicode, come through", () => {
    expect(parseCsv("a,b\nZoë,李")).toEqual([["a", "b"], ["Zoë", "李"]]);
  });

  test("csvLine writes what parseCsv reads back", () => {
    const fields = ["plain", "with, comma", 'with "quote"', "two\nlines", " padded ", "", "Zoë"];
    expect(parseCsv(csvLine(fields))).toEqual([fields]);
  });
});

describe("CSV: separators", () => {
  test("a header with no comma outside quotes names its separator, the semicolon or tab it has more of; a file is read, piece by piece, and written with it", () => {
    expect(["a,b;c", '"a;b",c', "a;b;c\tx", "a\tb", '"x,y";z', "\uFEFFE-Mail;Name\r\nx,y;z\r\n", "Email", ""].map(separatorOf)).toEqual([",", ",", ";", "\t", ";", ";", ",", ","]);
    const text = '\uFEFFName;Notes\r\n"Weiß; Söhne";a, b\r\n"x ""y""";\r\n';
    const whole = Array.from(csvRecords([text], ";"), (record) => record.fields);
    expect(whole).toEqual([["Name", "Notes"], ["Weiß; Söhne", "a, b"], ['x "y"', ""]]);
    expect(whole.map((fields) => csvLine(fields, ";"))).toEqual(["Name;Notes", '"Weiß; Söhne";"a, b"', '"x ""y""";']);
    for (let at = 0; at <= text.length; at++) expect(Array.from(csvRecords([text.slice(0, at), text.slice(at)], ";"), (record) => record.fields)).toEqual(whole);
  });

  test("a header written with a semicolon or tab quotes a cell holding a comma, so the invalid-rows file is read again with its separator, not as comma-separated", () => {
    for (const separator of [";", "\t"] as const) {
      const header = ["Name, full", "E-Mail", "import_row", "import_errors"];
      const line = csvLine(header, separator);
      expect([line, separatorOf(`${line}\r\n`), Array.from(csvRecords([line], separator), (record) => record.fields)]).toEqual([['"Name, full"', "E-Mail", "import_row", "import_errors"].join(separator), separator, [header]]);
    }
    expect(csvLine(["a;b", "c\td"])).toBe("a;b,c\td");
  });
});

describe("CSV: errors", () => {
  test("an unclosed quote, a quote inside an unquoted field, or text after a closing quote name their line", () => {
    expect(() => parseCsv('a\n"open\n\n')).toThrow(new CsvError(2, "a quoted field is never closed"));
    expect(() => parseCsv('a\nab"c\n')).toThrow(new CsvError(2, "a quote inside an unquoted field; quote the whole field and double the quote"));
    expect(() => parseCsv('a\n"ab"c\n')).toThrow(new CsvError(2, 'a closing quote must end its field (found "c" after it)'));
  });
});

describe("CSV: the line a record starts on", () => {
  test("counts the lines of quoted fields (LF, CRLF or a lone CR) and blank lines, so a message names the line a spreadsheet shows", () => {
    const lines = Array.from(csvRecords('Email,Notes\nq1@example.com,"a\nb\rc\r\nd"\n\nq2@example.com,n\n'), (record) => record.line);
    expect(lines).toEqual([1, 2, 7]);
    const text = 'Email,Notes\nq1@example.com,"a\nb\nc"\n\nq2@example.com,n,extra\n';
    expect(() => readSourceFile("people.csv", () => [text])).toThrow(new ConfigError("people.csv: line 6 (data row 2) has 3 fields but the header names 2 columns"));
  });
});

describe("CSV and JSON Lines read a piece at a time", () => {
  /** cuts lists the text cut into pieces at every position, and into pieces of one character. */
  const cuts = (text: string) => [...Array.from({ length: text.length + 1 }, (_, at) => [text.slice(0, at), text.slice(at)].filter(Boolean)), [...text]];
  const outcome = (read: () => unknown) => {
    try {
      return read();
    } catch (error) {
      return (error as Error).message;
    }
  };

  test("a record, field, doubled quote, CRLF or BOM cut by the end of a piece reads as from the whole text", () => {
    const texts = [
      '\uFEFFEmail,Name,Notes\r\na@example.com,"Lovelace, Ada","said ""hi""\r\nthen left"\r\n\r\nb@example.com,,\n"",x,""\n',
      'a,b\rc,"d\re"\r"x""",y',
      "Zoë,李\n\n,\n",
    ];
    for (const text of texts) {
      const whole = Array.from(csvRecords([text]));
      for (const pieces of cuts(text)) expect(Array.from(csvRecords(pieces))).toEqual(whole);
    }
  });

  test("an error names the same line wherever the pieces are cut", () => {
    for (const text of ['a\n"open\n\n', 'a\nab"c\n', 'a\n"ab"c\n', 'a\r\n"x\r\ny"z']) {
      const whole = outcome(() => Array.from(csvRecords([text])));
      expect(whole).toStartWith("line ");
      for (const pieces of cuts(text)) expect(outcome(() => Array.from(csvRecords(pieces)))).toBe(whole);
    }
  });

  test("JSON Lines: lines, their numbers and a BOM come through whatever the cuts", () => {
    const text = '\uFEFF{"email":"a@example.com"}\r\n\n{"email":"b@example.com","company":{"name":"Zoë"}}\n{"first_name":"李"}';
    const read = (pieces: string[]) => {
      const source = readSourceFile("people.jsonl", () => pieces);
      return { columns: source.columns, rowCount: source.rowCount, rows: Array.from(source.rows()) };
    };
    const whole = read([text]);
    expect(whole.rows.map((row) => row.values)).toEqual([{ email: "a@example.com" }, { email: "b@example.com", "company.name": "Zoë" }, { first_name: "李" }]);
    for (const pieces of cuts(text)) expect(read(pieces)).toEqual(whole);
    expect(outcome(() => read(['{"email":"a@example.com"}\n\n{"ema', 'il":\n']))).toBe("people.jsonl: line 3 is not JSON (JSON Parse error: Unexpected EOF)");
  });
});

describe("CSV and JSON Lines: a record's length is bounded", () => {
  const MIB = 1024 * 1024;
  /**
   * pieces gives `start`, then a megabyte of `filler` at a time, failing the test if asked for
   * more than the bound and two more pieces: the reader must stop there, not hold the rest.
   */
  function* pieces(start: string, filler: string) {
    yield start;
    const piece = filler.repeat(MIB / filler.length);
    for (let n = 0; n < MAX_IMPORT_RECORD_LENGTH / MIB + 2; n++) yield piece;
    throw new Error("read on past the bound");
  }
  const outcome = (read: () => unknown) => {
    try {
      read();
      return "read whole";
    } catch (error) {
      return (error as Error).message;
    }
  };

  test("a quote never closed, or one cell longer than the bound, stops the CSV at the line its record starts on", () => {
    const tooLong = `a record longer than ${MAX_IMPORT_RECORD_LENGTH} characters, more than any row can import (a quoted field never closed?)`;
    expect(outcome(() => Array.from(csvRecords(pieces('Email,Notes\nada@example.com,ok\ngrace@example.com,"never closed\n', "b@example.com,x\n"))))).toBe(`line 3: ${tooLong}`);
    expect(outcome(() => Array.from(csvRecords(pieces("Email,Notes\nada@example.com,", "x"))))).toBe(`line 2: ${tooLong}`);
    // Whole in one piece, the record is refused all the same.
    expect(() => parseCsv(`Email,Notes\na@example.com,${"x".repeat(MAX_IMPORT_RECORD_LENGTH)}\n`)).toThrow(new CsvError(2, tooLong));
    expect(parseCsv(`Email,Notes\na@example.com,${"x".repeat(MAX_IMPORT_RECORD_LENGTH - 100)}\n`)[1]![1]!.length).toBe(MAX_IMPORT_RECORD_LENGTH - 100);
  });

  test("a JSON Lines line longer than the bound stops the file at its line", () => {
    expect(outcome(() => readSourceFile("people.jsonl", () => pieces('{"email":"a@example.com"}\n{"email":"b@example.com","notes":"', "x")))).toBe(
      `people.jsonl: line 2 is longer than ${MAX_IMPORT_RECORD_LENGTH} characters, more than any row can import`,
    );
  });
});

describe("rows: tags", () => {
  test("a tags cell naming a tag twice sends it once, in the order first given", () => {
    const { map } = columnMap(["Email", "Tags"], undefined);
    expect(toImportRow({ row: 1, values: { Email: "a@example.com", Tags: "vip; new|vip, new" } }, map).contact).toEqual({ email: "a@example.com", tags: ["vip", "new"] });
  });
});
