import type { FieldError } from "../shared/problem.ts";
import {
  MAX_CONSENT_BYTES,
  MAX_CUSTOM_FIELDS,
  MAX_CUSTOM_FIELDS_BYTES,
  MAX_CUSTOM_FIELDS_DEPTH,
  MAX_CUSTOM_FIELD_KEY_LENGTH,
  MAX_EXTRA_PROPERTIES_BYTES,
} from "./limits.ts";

// The limits TypeBox cannot state (sizes as JSON, nesting depth, key lengths at any depth),
// checked by the services after schema validation so each refusal names its field and limit.

/** pointerSegment escapes one key for a JSON pointer (RFC 6901: ~ as ~0, / as ~1). */
export function pointerSegment(key: string | number): string {
  return `/${String(key).replaceAll("~", "~0").replaceAll("/", "~1")}`;
}

/** jsonBytes is the size of a value serialised as JSON, in UTF-8 bytes. */
function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value) ?? "");
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** depthOf is how deep objects and arrays nest in a value: a scalar is 0, an object of scalars 1. */
function depthOf(value: unknown): number {
  if (typeof value !== "object" || value === null) return 0;
  let deepest = 0;
  for (const child of Object.values(value)) deepest = Math.max(deepest, depthOf(child));
  return deepest + 1;
}

/** longKeyPointer returns the pointer of the first key longer than `max` characters, at any depth, or null. */
function longKeyPointer(value: unknown, max: number, pointer: string): string | null {
  if (typeof value !== "object" || value === null) return null;
  for (const [key, child] of Object.entries(value)) {
    const here = pointer + pointerSegment(key);
    if (!Array.isArray(value) && key.length > max) return here;
    const deeper = longKeyPointer(child, max, here);
    if (deeper) return deeper;
  }
  return null;
}

/** customFieldsErrors checks custom_fields against its count, key length, depth and size limits. */
export function customFieldsErrors(value: unknown): FieldError[] {
  if (!isObject(value)) return [];
  const errors: FieldError[] = [];
  const count = Object.keys(value).length;
  if (count > MAX_CUSTOM_FIELDS) errors.push({ pointer: "/custom_fields", detail: `has ${count} keys; the limit is ${MAX_CUSTOM_FIELDS}` });
  const longKey = longKeyPointer(value, MAX_CUSTOM_FIELD_KEY_LENGTH, "/custom_fields");
  if (longKey) errors.push({ pointer: longKey, detail: `is a key longer than the limit of ${MAX_CUSTOM_FIELD_KEY_LENGTH} characters` });
  const depth = depthOf(value);
  if (depth > MAX_CUSTOM_FIELDS_DEPTH) errors.push({ pointer: "/custom_fields", detail: `nests ${depth} levels deep; the limit is ${MAX_CUSTOM_FIELDS_DEPTH}` });
  const bytes = jsonBytes(value);
  if (bytes > MAX_CUSTOM_FIELDS_BYTES) errors.push({ pointer: "/custom_fields", detail: `is ${bytes} bytes as JSON; the limit is ${MAX_CUSTOM_FIELDS_BYTES} bytes (16 KiB)` });
  return errors;
}

/** consentErrors checks consent against its size limit. */
export function consentErrors(value: unknown): FieldError[] {
  const bytes = isObject(value) ? jsonBytes(value) : 0;
  return bytes > MAX_CONSENT_BYTES ? [{ pointer: "/consent", detail: `is ${bytes} bytes as JSON; the limit is ${MAX_CONSENT_BYTES} bytes (4 KiB)` }] : [];
}

/**
 * extraPropertiesErrors checks the further (undeclared) properties of a record, all of them
 * together as one JSON object, against MAX_EXTRA_PROPERTIES_BYTES; the error points at the
 * largest. Nulls are skipped: they clear a property rather than store one.
 */
export function extraPropertiesErrors(properties: Record<string, unknown>, declared: ReadonlySet<string>): FieldError[] {
  const extras = Object.entries(properties).filter(([key, value]) => !declared.has(key) && value !== null);
  const total = jsonBytes(Object.fromEntries(extras));
  if (total <= MAX_EXTRA_PROPERTIES_BYTES) return [];
  const [largest, largestBytes] = extras.map(([key, value]) => [key, jsonBytes(value)] as const).reduce((a, b) => (b[1] > a[1] ? b : a));
  return [
    {
      pointer: pointerSegment(largest),
      detail: `further properties come to ${total} bytes as JSON together; the limit is ${MAX_EXTRA_PROPERTIES_BYTES} bytes (64 KiB) (this one is ${largestBytes})`,
    },
  ];
}
