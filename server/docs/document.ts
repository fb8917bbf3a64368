// Turns the generator's output into a document that lints clean and generates usable client types:
// standard JSON Schema keywords only, named schemas referenced once from components.schemas.
import { toOpenAPISchema } from "@elysiajs/openapi/openapi";
import { Elysia, type TSchema } from "elysia";
import { DOCUMENT_AS } from "../http/openapi-docs.ts";

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

/** NamedSchemas maps a schema's identity to its name in components.schemas. */
type NamedSchemas = Map<string, string>;

/** refTo answers a reference to a named schema equal to `schema`, keeping a description and nullability given at the point of use. */
function refTo(schema: Json, named: NamedSchemas): Json | null {
  const exact = named.get(keyOf(schema));
  if (exact) return { $ref: `#/components/schemas/${exact}` };
  const { description, ...rest } = schema;
  const described = (ref: Json) => (description === undefined ? ref : { description, ...ref });
  const bare = description === undefined ? undefined : named.get(keyOf(rest));
  if (bare) return described({ $ref: `#/components/schemas/${bare}` });
  // The generator folds "X or null" into type: [X's type, "null"].
  if (Array.isArray(rest.type) && rest.type.length === 2 && rest.type.includes("null")) {
    const type = rest.type.find((t: string) => t !== "null");
    const name = named.get(keyOf({ ...rest, type })) ?? (description === undefined ? undefined : named.get(keyOf({ ...schema, type })));
    if (name) return described({ anyOf: [{ $ref: `#/components/schemas/${name}` }, { type: "null" }] });
  }
  return null;
}

/**
 * tidySchema rebuilds a schema (never changing the one given, which may be the validator's):
 * only standard keywords, a documentAs replacement applied, Elysia's numeric transforms stated as
 * numbers, and every sub-schema equal to a named one replaced by its $ref (the top one too unless
 * `top` is false, which builds the named schema itself).
 */
function tidySchema(schema: Json, named: NamedSchemas, top = true): Json {
  if (!schema || typeof schema !== "object") return schema;
  if (schema[DOCUMENT_AS]) return { ...schema[DOCUMENT_AS], ...(schema.description === undefined ? {} : { description: schema.description }) };
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
  // t.Record(t.String(), X) comes out as patternProperties {"^(.*)$": X}: any key, said the usual way.
  const anyKey = out.patternProperties?.["^(.*)$"];
  if (anyKey && Object.keys(out.patternProperties).length === 1 && out.additionalProperties === undefined) {
    delete out.patternProperties;
    out.additionalProperties = Object.keys(anyKey).length === 0 ? true : anyKey;
  }
  return (top && refTo(out, named)) || out;
}

/** generated is each schema as the OpenAPI generator writes it (it folds unions, rewrites transforms). */
function generated(schemas: Record<string, TSchema>): Record<string, Json> {
  const app = Object.entries(schemas).reduce((a, [name, schema]) => a.get(`/${name}`, () => null, { response: { 200: schema } }), new Elysia() as Elysia<any, any, any, any, any, any, any>);
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
    components[name] = tidySchema(schema, named, false);
    named.set(keyOf(components[name]), name);
  }
  return { components, named };
}

/** tidyDocument cleans every schema of the document's operations (paths and webhooks) and names the shared ones in components.schemas. */
export function tidyDocument(document: Json, schemas: Record<string, TSchema>): void {
  const { components, named } = namedComponents(schemas);
  const tidyContent = (content: Json | undefined) => {
    for (const media of Object.values(content ?? {})) if (media.schema) media.schema = tidySchema(media.schema, named);
  };
  for (const pathItem of [...Object.values((document.paths ?? {}) as Json), ...Object.values((document.webhooks ?? {}) as Json)]) {
    for (const operation of Object.values(pathItem as Json)) {
      for (const parameter of operation.parameters ?? []) parameter.schema = tidySchema(parameter.schema, named);
      tidyContent(operation.requestBody?.content);
      for (const response of Object.values((operation.responses ?? {}) as Json)) {
        tidyContent(response.content);
        for (const header of Object.values((response.headers ?? {}) as Json)) header.schema = tidySchema(header.schema, named);
      }
    }
  }
  document.components = { ...document.components, schemas: { ...document.components?.schemas, ...components } };
}
