// Turns the generator's output into a document that lints clean and generates usable client types:
// standard JSON Schema keywords only, named schemas referenced once from components.schemas.
import { toOpenAPISchema } from "@elysiajs/openapi/openapi";
import { Elysia, type TSchema } from "elysia";
import { DOCUMENT_AS, DOCUMENT_REFUSED, SENT_AS_TEXT } from "../http/openapi-docs.ts";
import { LENGTH_COUNTING } from "../limits/limits.ts";

type Json = Record<string, any>;

/** The keywords a served schema may carry: JSON Schema 2020-12 as OpenAPI 3.1 uses it. */
const SCHEMA_KEYWORDS = new Set([
  "$ref", "type", "enum", "const", "format", "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
  "exclusiveMaximum", "multipleOf", "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "properties",
  "patternProperties", "additionalProperties", "propertyNames", "required", "minProperties", "maxProperties", "anyOf", "oneOf",
  "allOf", "not", "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
]);
const ONE_SCHEMA = new Set(["items", "additionalProperties", "propertyNames", "not", "contains"]);
const SCHEMA_LISTS = new Set(["prefixItems", "anyOf", "oneOf", "allOf"]);
const SCHEMA_MAPS = new Set(["properties", "patternProperties"]);

/** keyOf is a schema's identity for matching: its JSON with keys sorted. */
function keyOf(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(keyOf).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${keyOf((value as Json)[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/**
 * numericBranch answers the number schema of Elysia's t.Integer/t.Numeric as the generator writes
 * them (a numeric string or a number), else null. That transform is for query input; in a body or
 * response the value is a JSON number, so the document states only the number.
 */
function numericBranch(schema: Json): Json | null {
  const branches = schema.anyOf;
  if (!Array.isArray(branches) || branches.length !== 2) return null;
  const [text, number] = branches as Json[];
  const isNumericString = text?.type === "string" && (text.format === "integer" || text.format === "numeric");
  return isNumericString && (number?.type === "integer" || number?.type === "number") ? number! : null;
}

/** NamedSchemas maps a schema's shape (the schema without its own description) to its name and description in components.schemas. */
type NamedSchemas = Map<string, { name: string; description: unknown }>;

/** shapeOf is a schema's identity for matching, leaving out its description (which a use may set differently). */
function shapeOf(schema: Json): string {
  const { description: _, ...shape } = schema;
  return keyOf(shape);
}

/**
 * refTo answers a reference to the named schema of the same shape as `schema`, or null. A
 * description other than the named schema's, given at the point of use, stays beside the $ref;
 * "X or null", which the generator folds into type: [X's type, "null"], becomes anyOf [$ref, null].
 */
function refTo(schema: Json, named: NamedSchemas): Json | null {
  const ref = (found: { name: string; description: unknown }, nullable: boolean): Json => {
    const target: Json = { $ref: `#/components/schemas/${found.name}` };
    const use = nullable ? { anyOf: [target, { type: "null" }] } : target;
    return schema.description === undefined || schema.description === found.description ? use : { description: schema.description, ...use };
  };
  const same = named.get(shapeOf(schema));
  if (same) return ref(same, false);
  if (Array.isArray(schema.type) && schema.type.length === 2 && schema.type.includes("null")) {
    const nonNull = named.get(shapeOf({ ...schema, type: schema.type.find((t: string) => t !== "null") }));
    if (nonNull) return ref(nonNull, true);
  }
  return null;
}

/**
 * tidySchema rebuilds a schema (never changing the one given, which may be the validator's):
 * only standard keywords, a documentAs replacement applied, documentRefused properties as false, a body sent as text stated as the
 * schema it wraps, Elysia's numeric transforms stated as numbers, and every sub-schema equal to a
 * named one replaced by its $ref (the top one too unless `top` is false, which builds the named
 * schema itself).
 */
function tidySchema(schema: Json, named: NamedSchemas, top = true): Json {
  if (!schema || typeof schema !== "object") return schema;
  if (schema[DOCUMENT_AS]) return withLengthCounting({ ...schema[DOCUMENT_AS], ...(schema.description === undefined ? {} : { description: schema.description }) });
  if (schema[SENT_AS_TEXT]) return tidySchema(schema.allOf[0], named, top);
  const numeric = numericBranch(schema);
  if (numeric) return tidySchema({ ...numeric, ...(schema.description === undefined ? {} : { description: schema.description }) }, named, top);
  const out: Json = {};
  for (const [keyword, value] of Object.entries(schema)) {
    if (!SCHEMA_KEYWORDS.has(keyword) && !keyword.startsWith("x-")) continue;
    if (ONE_SCHEMA.has(keyword) && value && typeof value === "object") out[keyword] = tidySchema(value, named);
    else if (SCHEMA_LISTS.has(keyword) && Array.isArray(value)) out[keyword] = value.map((s) => tidySchema(s, named));
    else if (SCHEMA_MAPS.has(keyword)) out[keyword] = Object.fromEntries(Object.entries(value as Json).map(([k, s]) => [k, tidySchema(s, named)]));
    else out[keyword] = value;
  }
  const refused = schema[DOCUMENT_REFUSED] as string[] | undefined;
  if (refused) out.properties = { ...out.properties, ...Object.fromEntries(refused.map((name) => [name, false])) };
  // t.Record(t.String(), X) comes out as patternProperties {"^(.*)$": X}: any key, said the usual way.
  const anyKey = out.patternProperties?.["^(.*)$"];
  if (anyKey && Object.keys(out.patternProperties).length === 1 && out.additionalProperties === undefined) {
    delete out.patternProperties;
    out.additionalProperties = Object.keys(anyKey).length === 0 ? true : anyKey;
  }
  const counted = withLengthCounting(out);
  return (top && refTo(counted, named)) || counted;
}

/**
 * withLengthCounting adds to the description of a string with a maxLength how the service counts
 * it: JSON Schema's maxLength counts code points, the service UTF-16 code units, so a client
 * checking with the schema alone would send strings of astral characters that are refused. It
 * changes `schema` and answers it.
 */
export function withLengthCounting(schema: Json): Json {
  if (typeof schema.maxLength !== "number" || ![schema.type].flat().includes("string")) return schema;
  const counting = `Length ${LENGTH_COUNTING}.`;
  schema.description = schema.description === undefined ? counting : `${schema.description} ${counting}`;
  return schema;
}

const SUB_SCHEMA_KEYWORDS = new Set([...ONE_SCHEMA, ...SCHEMA_LISTS, ...SCHEMA_MAPS]);

/**
 * withFieldDescriptions rebuilds a route's TypeBox schema for the generator (never changing the one
 * given, which is the validator's): a union of one type and null that has a description of its own
 * hands it to that type. The generator folds such a union into the type's keywords plus null, and
 * the type's description (a shared type's, such as MaxRate's) replaced the field's.
 */
export function withFieldDescriptions<T>(schema: T): T {
  if (!schema || typeof schema !== "object") return schema;
  const source = schema as Json;
  let out: Json | null = null;
  for (const [keyword, value] of Object.entries(source)) {
    if (!SUB_SCHEMA_KEYWORDS.has(keyword) || !value || typeof value !== "object") continue;
    const rebuilt = Array.isArray(value) ? value.map(withFieldDescriptions) : ONE_SCHEMA.has(keyword) ? withFieldDescriptions(value) : Object.fromEntries(Object.entries(value).map(([k, s]) => [k, withFieldDescriptions(s)]));
    out ??= { ...source };
    out[keyword] = rebuilt;
  }
  const branches = (out ?? source).anyOf;
  const nonNull = Array.isArray(branches) ? branches.filter((branch: Json) => branch?.type !== "null") : [];
  const [inner] = nonNull;
  if (source.description !== undefined && nonNull.length === 1 && nonNull.length < branches.length && inner.description !== undefined && inner.description !== source.description) {
    out ??= { ...source };
    out.anyOf = branches.map((branch: Json) => (branch === inner ? { ...branch, description: source.description } : branch));
  }
  return (out ?? schema) as T;
}

/** generated is each schema as the OpenAPI generator writes it (it folds unions, rewrites transforms). */
function generated(schemas: Record<string, TSchema>): Record<string, Json> {
  const app = Object.entries(schemas).reduce((a, [name, schema]) => a.get(`/${name}`, () => null, { response: { 200: withFieldDescriptions(schema) } }), new Elysia() as Elysia<any, any, any, any, any, any, any>);
  const { paths } = toOpenAPISchema(app);
  return Object.fromEntries(Object.keys(schemas).map((name) => [name, (paths as Json)[`/${name}`].get.responses["200"].content["application/json"].schema]));
}

/**
 * namedComponents builds components.schemas from the named schemas, in order: a schema may refer
 * to the ones listed before it (Contact to Account and User).
 */
function namedComponents(schemas: Record<string, TSchema>): { components: Record<string, Json>; named: NamedSchemas } {
  const named: NamedSchemas = new Map();
  const components: Record<string, Json> = {};
  for (const [name, schema] of Object.entries(generated(schemas))) {
    const component = tidySchema(schema, named, false);
    components[name] = component;
    named.set(shapeOf(component), { name, description: component.description });
    // A route may also document a schema as its plain JSON (a batch item is the single POST's body).
    named.set(shapeOf(tidySchema(JSON.parse(JSON.stringify(schemas[name])), named, false)), { name, description: component.description });
  }
  return { components, named };
}

/**
 * tidyDocument cleans every schema of the document's paths and names the shared ones in
 * components.schemas. Top-level webhooks are left as given: their bodies are the event
 * catalogue's schemas (GET /public/v1/event-types), which receivers compare with as they are.
 */
export function tidyDocument(document: Json, schemas: Record<string, TSchema>): void {
  const { components, named } = namedComponents(schemas);
  const tidy = (schema: Json) => tidySchema(schema, named);
  for (const pathItem of Object.values((document.paths ?? {}) as Json)) {
    for (const operation of Object.values(pathItem as Json)) {
      for (const parameter of operation.parameters ?? []) parameter.schema = tidy(parameter.schema);
      const contents = [operation.requestBody?.content, ...Object.values((operation.responses ?? {}) as Json).map((r) => r.content)];
      for (const media of contents.flatMap((content) => Object.values((content ?? {}) as Json))) if (media.schema) media.schema = tidy(media.schema);
      for (const response of Object.values((operation.responses ?? {}) as Json)) {
        for (const header of Object.values((response.headers ?? {}) as Json)) header.schema = tidy(header.schema);
      }
    }
  }
  document.components = { ...document.components, schemas: { ...document.components?.schemas, ...components } };
}
