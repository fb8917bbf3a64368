import { describe, expect, test } from "bun:test";
import { CsvError, csvLine, parseCsv } from "../../server/import/csv.ts";
import { ConfigError } from "../../server/config.ts";
import { columnMap, readSourceFile, toImportRow } from "../../server/import/rows.ts";

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

describe("CSV: errors", () => {
  test("an unclosed quote, a quote inside an unquoted field, or text after a closing quote name their line", () => {
    expect(() => parseCsv('a\n"open\n\n')).toThrow(new CsvError(2, "a quoted field is never closed"));
    expect(() => parseCsv('a\nab"c\n')).toThrow(new CsvError(2, "a quote inside an unquoted field; quote the whole field and double the quote"));
    expect(() => parseCsv('a\n"ab"c\n')).toThrow(new CsvError(2, 'a closing quote must end its field (found "c" after it)'));
  });
});

describe("CSV: the line a record starts on", () => {
  test("counts the lines of quoted fields (LF, CRLF or a lone CR) and blank lines, so a message names the line a spreadsheet shows", () => {
    const lines: number[] = [];
    parseCsv('Email,Notes\nq1@example.com,"a\nb\rc\r\nd"\n\nq2@example.com,n\n', lines);
    expect(lines).toEqual([1, 2, 7]);
    const text = 'Email,Notes\nq1@example.com,"a\nb\nc"\n\nq2@example.com,n,extra\n';
    expect(() => readSourceFile("people.csv", text)).toThrow(new ConfigError("people.csv: line 6 (data row 2) has 3 fields but the header names 2 columns"));
  });
});

describe("rows: tags", () => {
  test("a tags cell naming a tag twice sends it once, in the order first given", () => {
    const { map } = columnMap(["Email", "Tags"], undefined);
    expect(toImportRow({ row: 1, values: { Email: "a@example.com", Tags: "vip; new|vip, new" } }, map).contact).toEqual({ email: "a@example.com", tags: ["vip", "new"] });
  });
});
