// The README's table of problem types against the types the code can send: a client branches on
// `type` (two 409s of one route can need opposite remedies), so the table must name every one.
import { expect, test } from "bun:test";
import { Glob } from "bun";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PROBLEM_TYPES } from "../../server/shared/problem.ts";

const ROOT = join(import.meta.dir, "..", "..");

// server/operators/ holds the console's operator accounts: their refusals (sign-in-failed,
// last-operator, ...) reach only console pages and the CLI, never an API client.
const CONSOLE_ONLY = "server/operators/";

// A problem is built by `new ProblemError(status, "slug", ...)` or `problem(status, "slug", ...)`;
// every helper (validationProblem, notFound, unauthorized, methodNotAllowed...) does so with the
// slug written out, so reading that literal finds the types the helpers build too.
const BUILDERS = /(?<!function\s)\b(?:new ProblemError|problem)\(\s*([^,()]*),\s*([^,]*)/g;

/** typesBuiltIn maps each problem type a source text builds to the statuses written beside it, and lists the builders whose type is no string literal. */
function typesBuiltIn(source: string): { types: Map<string, Set<number>>; unread: string[] } {
  const types = new Map<string, Set<number>>();
  const unread: string[] = [];
  for (const [, status, slug] of source.matchAll(BUILDERS)) {
    const literal = /^"([a-z-]+)"/.exec(slug!.trim());
    if (!literal) {
      unread.push(slug!.trim());
      continue;
    }
    const statuses = types.get(literal[1]!) ?? new Set<number>();
    if (/^\d{3}$/.test(status!.trim())) statuses.add(Number(status!.trim()));
    types.set(literal[1]!, statuses);
  }
  return { types, unread };
}

/** sorted turns a map of types to statuses into a plain object, keys and statuses in order, for toEqual. */
function sorted(types: Map<string, Set<number>>): Record<string, number[]> {
  return Object.fromEntries([...types.keys()].sort().map((type) => [type, [...types.get(type)!].sort()]));
}

/** emittedTypes reads every problem type the API's code can send, with its statuses. */
function emittedTypes(): { types: Record<string, number[]>; unread: string[] } {
  const all = new Map<string, Set<number>>();
  const unread: string[] = [];
  for (const file of [...new Glob("server/**/*.ts").scanSync({ cwd: ROOT })].sort()) {
    if (file.startsWith(CONSOLE_ONLY)) continue;
    const found = typesBuiltIn(readFileSync(join(ROOT, file), "utf8"));
    unread.push(...found.unread.map((slug) => `${file}: ${slug}`));
    for (const [type, statuses] of found.types) all.set(type, new Set([...(all.get(type) ?? []), ...statuses]));
  }
  return { types: sorted(all), unread };
}

const readme = () => readFileSync(join(ROOT, "README.md"), "utf8");

/** problemTypesSection is the README's "Problem types" section, up to the next heading. */
function problemTypesSection(text: string): string {
  const start = text.indexOf("\n### Problem types\n");
  return start < 0 ? "" : text.slice(start, text.indexOf("\n#", start + 1));
}

/** documentedTypes reads the README's table of problem types: each row's type and the statuses in its status cell. */
function documentedTypes(text: string): Record<string, number[]> {
  const rows = [...problemTypesSection(text).matchAll(/^\| `urn:crm:problem:([a-z-]+)` \| ([^|]*) \|/gm)];
  return sorted(new Map(rows.map(([, type, status]) => [type!, new Set([...status!.matchAll(/\b\d{3}\b/g)].map((m) => Number(m[0])))])));
}

test("the README's problem types table lists every type the API can send, with its statuses, and no other", () => {
  expect(documentedTypes(readme())).toEqual(emittedTypes().types);
});

// PROBLEM_TYPES is the list the OpenAPI document's Problem.type enum is made of.
test("the code's list of problem types is the types the API's code builds, in the README table's order", () => {
  const tableOrder = [...problemTypesSection(readme()).matchAll(/^\| `urn:crm:problem:([a-z-]+)` \|/gm)].map((m) => m[1]!);
  const listed: string[] = [...PROBLEM_TYPES];
  expect({ listed: [...listed].sort(), inTableOrder: listed }).toEqual({ listed: Object.keys(emittedTypes().types), inTableOrder: tableOrder });
});

// toProblem renders a ProblemError that was built, with its slug written out, somewhere above.
// Any other builder taking its type from a variable would hide a type from this test: list what it
// can be given here, or write the slug out where it is built.
test("every problem the server builds names its type as a string literal, which the test above reads", () => {
  // errorToProblem's refusal.slug is a PartlyDone's: the type of the problem its cause was answered with, built above.
  expect(emittedTypes().unread).toEqual(["server/http/errors.ts: refusal.slug", "server/shared/problem.ts: this.slug"]);
});

// The console's live parts read two JSON endpoints; a problem there is problem+json, as on the API.
// Their refusals come from the same code as the API's; the console's own types (rotation-closed,
// form-being-sent...) answer forms, on pages.
test("the README names the types the console's JSON endpoints send, each a type of its table", () => {
  const sentence = /The console's two JSON\s+endpoints[^]*?\.\s/.exec(problemTypesSection(readme()))?.[0] ?? "";
  const named = [...sentence.matchAll(/`([a-z-]+)`/g)].map((m) => m[1]!);
  expect(named.length).toBeGreaterThan(0);
  expect(named.filter((type) => !(PROBLEM_TYPES as readonly string[]).includes(type))).toEqual([]);
});

test("every problem type the README mentions is one of its table", () => {
  const text = readme();
  const documented = documentedTypes(text);
  const mentioned = [...new Set([...text.matchAll(/urn:crm:problem:([a-z-]+)/g)].map((m) => m[1]!))];
  expect(mentioned.filter((type) => !(type in documented))).toEqual([]);
});

test("the reading finds slugs over several lines, with a status in a variable, and reports a slug it cannot read", () => {
  const source = [
    'throw new ProblemError(\n  503,\n  "body-buffer-full",\n  `detail`,\n);',
    'problem(403, "browser-request", "detail")',
    'if (status >= 400) return new ProblemError(status, "bad-request", "detail");',
    "return new ProblemError(409, kind, detail);",
    "export function problem(status: number, slug: string, detail: string) {}",
  ].join("\n");
  const found = typesBuiltIn(source);
  expect({ types: sorted(found.types), unread: found.unread }).toEqual({
    types: { "bad-request": [], "body-buffer-full": [503], "browser-request": [403] },
    unread: ["kind"],
  });
});
