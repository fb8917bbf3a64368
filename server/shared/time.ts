/** DAY_MS is one day in milliseconds. */
export const DAY_MS = 86_400_000;
/** HOUR_MS is an hour in milliseconds, the unit of the hourly statistics, delivery counts and the tombstones' horizon. */
export const HOUR_MS = 3_600_000;

/** hourOf is the start of the hour holding an instant, as the hourly tables key it (toward zero before 1970). */
export const hourOf = (at: number) => at - (at % HOUR_MS);
// A page of contacts formats 50 timestamps, mostly of a few days; reusing the date part of the last
// day formatted makes each about 3x cheaper than new Date(ms).toISOString(), which allocates a Date.
let cachedDayStart = 0;
let cachedDayText = ""; // "YYYY-MM-DDT" of the day starting at cachedDayStart; "" until the first call

const pad2 = (n: number) => (n < 10 ? `0${n}` : `${n}`);

/** toTimestamp formats Unix milliseconds as RFC 3339 UTC with milliseconds (exactly as Date#toISOString). */
export function toTimestamp(ms: number): string {
  const inDay = ms - cachedDayStart;
  if (cachedDayText === "" || !(inDay >= 0 && inDay < DAY_MS) || !Number.isInteger(ms)) {
    const iso = new Date(ms).toISOString();
    if (Number.isInteger(ms)) {
      cachedDayStart = ms - (((ms % DAY_MS) + DAY_MS) % DAY_MS);
      cachedDayText = iso.slice(0, iso.indexOf("T") + 1);
    }
    return iso;
  }
  const seconds = Math.floor(inDay / 1000);
  const millis = inDay % 1000;
  return `${cachedDayText}${pad2(Math.floor(seconds / 3600))}:${pad2(Math.floor(seconds / 60) % 60)}:${pad2(seconds % 60)}.${millis < 10 ? "00" : millis < 100 ? "0" : ""}${millis}Z`;
}

/** LATEST_TIMESTAMP_MS is 9999-12-31T23:59:59.999Z, the last instant RFC 3339's four-digit year writes. */
export const LATEST_TIMESTAMP_MS = 253_402_300_799_999;

/** toOptionalTimestamp formats a nullable millisecond value. */
export function toOptionalTimestamp(ms: number | null): string | null {
  return ms === null ? null : toTimestamp(ms);
}

// RFC 3339's time-secfrac is "." 1*DIGIT: any number of digits, of which the milliseconds kept are read.
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3})\d*)?(?:[Zz]|([+-]\d{2}):(\d{2}))$/;

/** daysInMonthOf counts the days of a month (1-12); setUTCFullYear, unlike Date.UTC, keeps years 0-99 as they are. */
function daysInMonthOf(year: number, month: number): number {
  return new Date(new Date(0).setUTCFullYear(year, month, 0)).getUTCDate();
}

// A date-time whose offset's sign is a space: a "+" sent unencoded, which a query string decodes to one.
const DECODED_PLUS = /^(\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?) (\d{2}:\d{2})$/;

/**
 * withOffsetPlus gives back a "+" a query string decoded to a space at a date-time's offset
 * (`?updated_after=2026-11-21T10:00:00+05:30`, as curl and a browser's address bar send it): a
 * space is never valid there, so the reading is not a guess. Other text is returned as it is.
 */
export function withOffsetPlus(value: string): string {
  return value.replace(DECODED_PLUS, "$1+$2");
}

/**
 * parseTimestamp reads an RFC 3339 date-time into Unix milliseconds, or returns null when it is not
 * one; digits of a fraction past the millisecond are cut, never rounded up. Date.parse rolls an
 * impossible date over (February 31 becomes March 3), so each field is checked against its range first.
 * A leap second (second 60, which RFC 3339 allows) is read as the last millisecond of its minute,
 * which Unix time has no other place for; only at 23:59 UTC, where leap seconds are inserted.
 */
export function parseTimestamp(value: string): number | null {
  const parts = RFC3339.exec(value);
  if (!parts) return null;
  const [year, month, day, hour, minute, second] = parts.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const daysInMonth = daysInMonthOf(year, month);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth || hour > 23 || minute > 59 || second > 60) return null;
  const [millis, offsetHours, offsetMinutes] = [parts[7], parts[8], parts[9]];
  if (offsetHours !== undefined && (Math.abs(Number(offsetHours)) > 23 || Number(offsetMinutes) > 59)) return null;
  const zone = offsetHours === undefined ? "Z" : `${offsetHours}:${offsetMinutes}`;
  const leap = second === 60;
  const ms = Date.parse(`${leap ? `${value.slice(0, 17)}59.999` : `${value.slice(0, 19)}${millis === undefined ? "" : `.${millis}`}`}${zone}`);
  if (Number.isNaN(ms)) return null;
  return leap && ((ms % DAY_MS) + DAY_MS) % DAY_MS < DAY_MS - 60_000 ? null : ms;
}

/**
 * timestampRefusal is the detail of a 422 for a value parseTimestamp refused: "must be an RFC 3339
 * date-time" and `example`, or, for one refused only for its second 60 away from 23:59 UTC, why:
 * RFC 3339 (section 5.6) allows second 60 for a leap second, and leap seconds are inserted at
 * 23:59:60 UTC only, whatever the offset it is written in.
 */
export function timestampRefusal(value: unknown, example = ""): string {
  const misplacedLeap = typeof value === "string" && RFC3339.exec(value)?.[6] === "60" && parseTimestamp(`${value.slice(0, 17)}59${value.slice(19)}`) !== null;
  return misplacedLeap ? "must be an RFC 3339 date-time; second 60 is a leap second, which RFC 3339 allows at 23:59:60 UTC only" : `must be an RFC 3339 date-time${example}`;
}

/** settlesWithin tells whether a promise settles before a number of milliseconds pass. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: Timer | undefined;
  const expired = new Promise<false>((resolve) => (timer = setTimeout(resolve, ms, false)));
  try {
    return await Promise.race([promise.then(() => true, () => true), expired]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * notBefore is the instant to stamp a change of a row last stamped at `previous`: now, or
 * `previous` when that is later. Instances stamp with their own clocks, and one behind another
 * would otherwise give a newer version an earlier updated_at. Not 1 ms past it: many changes of
 * one row within a millisecond (a batch, an import) would then push its stamp ahead of every
 * clock, and a poller's updated_after past other rows' changes; the version orders them.
 */
export function notBefore(previous: number, now: number): number {
  return Math.max(now, previous);
}
