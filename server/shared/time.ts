/** toTimestamp formats Unix milliseconds as RFC 3339 UTC with milliseconds. */
export function toTimestamp(ms: number): string {
  return new Date(ms).toISOString();
}

/** toOptionalTimestamp formats a nullable millisecond value. */
export function toOptionalTimestamp(ms: number | null): string | null {
  return ms === null ? null : toTimestamp(ms);
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

/** parseTimestamp reads an RFC 3339 date-time into Unix milliseconds, or returns null when it is not one. */
export function parseTimestamp(value: string): number | null {
  if (!RFC3339.test(value)) return null;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? null : ms;
}
