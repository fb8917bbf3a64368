import type { TSchema } from "@sinclair/typebox";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { ValueErrorType } from "@sinclair/typebox/errors";
import { Hash } from "@sinclair/typebox/value";
import { LENGTH_COUNTING } from "../limits/limits.ts";
import { validationProblem, type FieldError, type ProblemError } from "../shared/problem.ts";
import { codePoints } from "../shared/text.ts";

/** SchemaIssue is one TypeBox value error, as Elysia's ValidationError and TypeBox's checkers report it. */
export interface SchemaIssue {
  type?: ValueErrorType;
  path?: string;
  message: string;
  schema?: { error?: unknown; [keyword: string]: unknown };
  value?: unknown;
  /** a union's failure carries each variant's own issues */
  errors?: Iterable<SchemaIssue>[];
}

/** UNEXPECTED_PROPERTY is TypeBox's message for a property an object schema does not allow (reported with the object's schema). */
const UNEXPECTED_PROPERTY = "Unexpected property";

function unexpectedPropertyDetail(objectSchema: SchemaIssue["schema"]): string {
  const known = Object.keys((objectSchema as { properties?: object } | undefined)?.properties ?? {});
  return known.length > 0 ? `is not a field here; known: ${known.join(", ")}` : "is not a field here; this body takes none";
}

/**
 * plainDetail words the TypeBox issues of strings, lists and objects, which console and batch
 * schemas leave to TypeBox, as a person would; other issues keep TypeBox's message (every number
 * and flag a client sends has an `error` text of its own).
 */
function plainDetail(issue: SchemaIssue): string {
  const limit = (keyword: string) => String(issue.schema?.[keyword]);
  switch (issue.type) {
    case ValueErrorType.StringMaxLength:
      return `must be at most ${limit("maxLength")} characters`;
    case ValueErrorType.StringMinLength:
      return issue.schema?.minLength === 1 ? "must not be empty" : `must be at least ${limit("minLength")} characters`;
    case ValueErrorType.String:
      return "must be a string";
    case ValueErrorType.Object:
      return "must be an object";
    case ValueErrorType.Array:
      return "must be a list";
    case ValueErrorType.ArrayMaxItems:
      return `must have at most ${limit("maxItems")} items`;
    case ValueErrorType.ArrayMinItems:
      return issue.schema?.minItems === 1 ? "must not be empty" : `must have at least ${limit("minItems")} items`;
    case ValueErrorType.ObjectRequiredProperty:
      return "is required";
    default:
      return issue.message;
  }
}

/**
 * longOnlyInCodeUnits tells whether a string is over its schema's maxLength (its own, or a
 * nullable union's) as the service counts, in UTF-16 code units, but not in code points, as JSON
 * Schema validators count: the client checked it against the document and needs to know why.
 */
function longOnlyInCodeUnits(issue: SchemaIssue): boolean {
  const value = issue.value;
  if (typeof value !== "string") return false;
  const schemas = [issue.schema, ...((issue.schema?.anyOf as SchemaIssue["schema"][] | undefined) ?? [])];
  return schemas.some((schema) => typeof schema?.maxLength === "number" && value.length > schema.maxLength && codePoints(value) <= schema.maxLength);
}

/**
 * detailOf words one issue: the schema's own `error` text when it has one (a function of the value
 * gives it, as Elysia allows), else plain words, saying how its length is counted where that is
 * why it is refused.
 */
function detailOf(issue: SchemaIssue): string {
  if (issue.message === UNEXPECTED_PROPERTY) return unexpectedPropertyDetail(issue.schema);
  const error = issue.schema?.error;
  const detail = typeof error === "string" ? error : typeof error === "function" ? String(error({ value: issue.value })) : plainDetail(issue);
  return longOnlyInCodeUnits(issue) ? `${detail} (${LENGTH_COUNTING})` : detail;
}

/**
 * repeatsOf names each item of a list that repeats an earlier one (as uniqueItems compares them)
 * at its own index, unless `named` already names it; null for an issue that is no uniqueItems one.
 */
function repeatsOf(issue: SchemaIssue, named: FieldError[]): FieldError[] | null {
  if (issue.type !== ValueErrorType.ArrayUniqueItems || !Array.isArray(issue.value)) return null;
  const path = issue.path ?? "";
  const pointers = new Set(named.map((error) => error.pointer));
  const first = new Map<bigint, number>();
  const errors: FieldError[] = [];
  issue.value.forEach((item, index) => {
    const hash = Hash(item);
    const earlier = first.get(hash);
    if (earlier === undefined) first.set(hash, index);
    else if (!pointers.has(`${path}/${index}`)) errors.push({ pointer: `${path}/${index}`, detail: `repeats item ${earlier}` });
  });
  return errors;
}

/**
 * listItemErrors words the failure of a nullable list (a union of a list and null, whose `error`
 * text describes the list as a whole) at the items at fault, by their RFC 6901 index: a client
 * fixes /tags/3, not the whole list. Null when the list is wrong as a whole (not a list, too many
 * items): the union's text says so, and a list past its length gets no error per item, of which
 * a 1 MiB body could hold hundreds of thousands.
 */
function listItemErrors(issue: SchemaIssue): FieldError[] | null {
  const path = issue.path ?? "";
  variants: for (const variant of issue.errors ?? []) {
    const items: SchemaIssue[] = [];
    let repeated: SchemaIssue | undefined;
    // The list's own faults come before its items' (TypeBox checks the length first).
    for (const item of variant) {
      if ((item.path ?? "").startsWith(`${path}/`)) items.push(item);
      else if (item.type === ValueErrorType.ArrayUniqueItems) repeated = item;
      else continue variants;
    }
    const errors = fieldErrorsOf(items);
    return [...errors, ...((repeated && repeatsOf(repeated, errors)) ?? [])];
  }
  return null;
}

/**
 * fieldErrorsOf turns TypeBox issues into field errors: one per field, the schema's own `error`
 * text when it has one (else plain words), `where` saying whether the path is a body pointer,
 * parameter or header. A bad item of a list in a body, or a repeat, is named at its index.
 */
export function fieldErrorsOf(issues: Iterable<SchemaIssue>, where: "pointer" | "parameter" | "header" = "pointer"): FieldError[] {
  const seen = new Set<string>();
  const errors: FieldError[] = [];
  for (const issue of issues) {
    const path = issue.path ?? "";
    if (seen.has(path)) continue; // TypeBox reports a union failure and its branches; the first says it
    // A string where a list belongs is also walked character by character; the list's error says it.
    if ([...seen].some((parent) => path.startsWith(`${parent}/`))) continue;
    seen.add(path);
    const items = where !== "pointer" ? null : issue.type === ValueErrorType.Union ? listItemErrors(issue) : repeatsOf(issue, errors);
    if (items) errors.push(...items);
    else errors.push(where === "pointer" ? { pointer: path, detail: detailOf(issue) } : { [where]: path.replace(/^\//, ""), detail: detailOf(issue) });
  }
  return errors;
}

/**
 * schemaChecker compiles a body schema once and returns a function giving a value's field errors
 * (none when it conforms), as a route with that body schema would report them. Batch endpoints use
 * it to validate each item alone, so one bad item does not refuse the rest.
 */
export function schemaChecker(schema: TSchema): (value: unknown) => FieldError[] {
  const compiled = TypeCompiler.Compile(schema);
  return (value) => (compiled.Check(value) ? [] : fieldErrorsOf(compiled.Errors(value)));
}

/**
 * fieldsChecker compiles a schema once and returns a check that gives back a value conforming to
 * it, or throws 422 naming each field that breaks it (fieldsProblem): what a console form or a
 * command checks its fields with, as the API's route with that schema would.
 */
export function fieldsChecker<T extends TSchema>(schema: T): (value: unknown) => T["static"] {
  const check = schemaChecker(schema);
  return (value) => {
    const errors = check(value);
    if (errors.length > 0) throw fieldsProblem(errors);
    return value as T["static"];
  };
}

/** fieldNameOf names the field a field error is about: its pointer's first segment or its parameter ("/target_url" and "/events/1" name target_url and events); "" for the body as a whole. */
export function fieldNameOf(error: FieldError): string {
  return (error.pointer ?? error.parameter ?? "").split("/").filter(Boolean)[0] ?? "";
}

/** fieldWords says a field error as a person typed the field: "max rate must be ...". */
export function fieldWords(error: FieldError): string {
  return `${fieldNameOf(error).replace(/_/g, " ")} ${error.detail}`;
}

/** fieldsProblem is the 422 of a form or command whose fields failed their schema: the detail names each field as a person typed it (fieldWords), the errors keep their pointers. */
export function fieldsProblem(errors: FieldError[]): ProblemError {
  return validationProblem(errors, `${errors.map(fieldWords).join("; ")}.`);
}
