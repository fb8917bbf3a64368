import type { TSchema } from "@sinclair/typebox";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { validationProblem, type FieldError, type ProblemError } from "../shared/problem.ts";

/** SchemaIssue is one TypeBox value error, as Elysia's ValidationError and TypeBox's checkers report it. */
export interface SchemaIssue {
  path?: string;
  message: string;
  schema?: { error?: unknown };
}

/** UNEXPECTED_PROPERTY is TypeBox's message for a property an object schema does not allow (reported with the object's schema). */
const UNEXPECTED_PROPERTY = "Unexpected property";

function unexpectedPropertyDetail(objectSchema: SchemaIssue["schema"]): string {
  const known = Object.keys((objectSchema as { properties?: object } | undefined)?.properties ?? {});
  return known.length > 0 ? `is not a field here; known: ${known.join(", ")}` : "is not a field here; this body takes none";
}

/**
 * fieldErrorsOf turns TypeBox issues into field errors: one per field, the schema's own `error`
 * text when it has one, `where` saying whether the path is a body pointer, parameter or header.
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
    const detail = issue.message === UNEXPECTED_PROPERTY ? unexpectedPropertyDetail(issue.schema) : typeof issue.schema?.error === "string" ? issue.schema.error : issue.message;
    errors.push(where === "pointer" ? { pointer: path, detail } : { [where]: path.replace(/^\//, ""), detail });
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

/** fieldsProblem is the 422 of a form or command whose fields failed their schema: the detail names each field as a person typed it ("max rate must be ..."), the errors keep their pointers. */
export function fieldsProblem(errors: FieldError[]): ProblemError {
  const named = errors.map((e) => `${(e.pointer ?? e.parameter ?? "").split("/").filter(Boolean)[0]?.replace(/_/g, " ") ?? ""} ${e.detail}`);
  return validationProblem(errors, `${named.join("; ")}.`);
}
