import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { parseTimestamp, toOptionalTimestamp, toTimestamp } from "../../server/shared/time.ts";

const DAY_MS = 86_400_000;

describe("timestamps: formatting", () => {
  test("toTimestamp equals Date#toISOString for any millisecond, in any call order (its day cache must never leak)", () => {
    const instant = fc.integer({ min: 0, max: 4_102_444_800_000 }); // 1970 to 2100
    const nearMidnight = fc.tuple(fc.integer({ min: 0, max: 47_000 }), fc.integer({ min: -2, max: 2 })).map(([day, offset]) => day * DAY_MS + offset);
    fc.assert(
      fc.property(fc.array(fc.oneof(instant, nearMidnight), { minLength: 1, maxLength: 20 }), (values) => {
        for (const ms of values) expect(toTimestamp(ms)).toBe(new Date(ms).toISOString());
      }),
      { numRuns: 2000 },
    );
  });

  test("the last and first millisecond of a day, and the same day again after another", () => {
    const midnight = Date.UTC(2026, 10, 21);
    expect([midnight - 1, midnight, midnight + 1, midnight + DAY_MS - 1, midnight - DAY_MS, midnight + 5].map(toTimestamp)).toEqual([
      "2026-11-20T23:59:59.999Z",
      "2026-11-21T00:00:00.000Z",
      "2026-11-21T00:00:00.001Z",
      "2026-11-21T23:59:59.999Z",
      "2026-11-20T00:00:00.000Z",
      "2026-11-21T00:00:00.005Z",
    ]);
  });

  test("toOptionalTimestamp keeps null", () => {
    expect(toOptionalTimestamp(null)).toBeNull();
    expect(toOptionalTimestamp(0)).toBe("1970-01-01T00:00:00.000Z");
  });
});

describe("timestamps: parsing", () => {
  test("RFC 3339 date-times with Z or an offset, with or without fractions", () => {
    expect(parseTimestamp("2026-11-21T10:00:00Z")).toBe(Date.UTC(2026, 10, 21, 10));
    expect(parseTimestamp("2026-11-21T10:00:00.250Z")).toBe(Date.UTC(2026, 10, 21, 10, 0, 0, 250));
    expect(parseTimestamp("2026-11-21T12:00:00+02:00")).toBe(Date.UTC(2026, 10, 21, 10));
  });

  test("a fraction of any number of digits is read to the millisecond it falls in, never rounded up (RFC 3339 time-secfrac is 1*DIGIT)", () => {
    const at = Date.UTC(2026, 10, 21, 10, 0, 0, 123);
    for (const fraction of ["123", "1239", "123999999", "1234567891", "123" + "9".repeat(40)]) {
      expect({ fraction, ms: parseTimestamp(`2026-11-21T10:00:00.${fraction}Z`) }).toEqual({ fraction, ms: at });
    }
    expect(parseTimestamp("2026-11-21T12:00:00.1234567891+02:00")).toBe(at);
    expect(parseTimestamp("2026-11-21T23:59:59.99999999999Z")).toBe(Date.UTC(2026, 10, 21, 23, 59, 59, 999));
    expect(parseTimestamp("2026-11-21T10:00:00.Z")).toBeNull();
  });

  test("anything else is null", () => {
    for (const text of ["", "2026-11-21", "2026-11-21 10:00:00Z", "1700000000", "2026-13-01T00:00:00Z", "2026-11-21T10:00:00", "yesterday"]) {
      expect(parseTimestamp(text)).toBeNull();
    }
  });

  test("a date or time that does not exist is null, not rolled over into the next month or day", () => {
    for (const text of ["2026-02-31T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-00-10T00:00:00Z", "2026-11-00T00:00:00Z", "2026-11-21T24:00:00Z", "2026-11-21T10:60:00Z", "2026-11-21T10:00:60Z", "2026-11-21T10:00:00+24:00", "2026-11-21T10:00:00+02:60"]) {
      expect(parseTimestamp(text)).toBeNull();
    }
    expect(parseTimestamp("2028-02-29T23:59:59Z")).toBe(Date.UTC(2028, 1, 29, 23, 59, 59));
    expect(parseTimestamp("2000-02-29T00:00:00Z")).toBe(Date.UTC(2000, 1, 29));
  });
});
