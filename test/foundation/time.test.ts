import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { parseTimestamp, toOptionalTimestamp, toTimestamp } from "../../server/shared/time.ts";
import { ChangeClock } from "../../server/db/change-clock.ts";

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

  test("a leap second (second 60) is the last millisecond of its minute, at 23:59 UTC, with an offset too; second 60 of any other minute is null", () => {
    const last = Date.UTC(2016, 11, 31, 23, 59, 59, 999);
    const leaps = ["2016-12-31T23:59:60Z", "2016-12-31t23:59:60.5z", "2016-12-31T23:59:60.999999Z", "2017-01-01T05:29:60+05:30", "2016-12-31T15:59:60-08:00", "2016-12-31T23:59:60-00:00"];
    expect(leaps.map((text) => [text, parseTimestamp(text)])).toEqual(leaps.map((text) => [text, last]));
    // RFC 3339's own example (section 5.8), and the first leap second
    expect(parseTimestamp("1990-12-31T15:59:60-08:00")).toBe(Date.UTC(1990, 11, 31, 23, 59, 59, 999));
    expect(parseTimestamp("1972-06-30T23:59:60Z")).toBe(Date.UTC(1972, 5, 30, 23, 59, 59, 999));
    for (const text of ["2016-12-31T23:59:60+01:00", "2016-12-31T23:58:60Z", "2016-12-31T22:59:60Z", "2016-12-31T23:59:61Z", "2016-12-31T23:59:99Z", "9999-12-31T23:59:60-00:01"]) {
      expect([text, parseTimestamp(text)]).toEqual([text, null]);
    }
  });
});

describe("the change clock", () => {
  test("stands still while the wall clock shows less than the latest time it read or was raised to, and follows the clock again once it catches up", () => {
    let wall = 1_000;
    const clock = new ChangeClock(() => wall);
    try {
      const seen = [clock.now()];
      for (const reading of [880, 999, 1_000, 1_001]) {
        wall = reading;
        seen.push(clock.now());
      }
      clock.raise(5_000);
      seen.push(clock.now());
      clock.raise(null);
      clock.raise(10);
      seen.push(clock.now());
      expect(seen).toEqual([1_000, 1_000, 1_000, 1_000, 1_001, 5_000, 5_000]);
    } finally {
      clock.stop();
    }
  });

  test("reads the wall clock while nothing is stamped: a time shown before a step back is not stamped below afterwards", async () => {
    let wall = 1_000_000;
    let reads = 0;
    const clock = new ChangeClock(() => (reads++, wall));
    try {
      const deadline = Date.now() + 10_000;
      while (reads === 0 && Date.now() < deadline) await Bun.sleep(10);
      wall = 880_000;
      expect({ reads: reads > 0, now: clock.now() }).toEqual({ reads: true, now: 1_000_000 });
    } finally {
      clock.stop();
    }
  });
});
