import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";

/** dereference answers what a `$ref` into components names (a schema, a response), or the object itself when it is inline. */
export function dereference(document: any, node: any): any {
  const ref: unknown = node?.$ref;
  if (typeof ref !== "string") return node;
  const [, kind, name] = /^#\/components\/(\w+)\/(.+)$/.exec(ref) ?? [];
  const target = kind && name ? document.components?.[kind]?.[name] : undefined;
  if (!target) throw new Error(`${ref} names nothing in components`);
  return target;
}

/**
 * documentValidator checks values against schemas of an OpenAPI 3.1 document as a client's JSON
 * Schema validator would (Ajv, draft 2020-12, formats checked), its components.schemas reachable
 * by $ref; it answers what is wrong, in words (empty when the value validates).
 */
export function documentValidator(document: any): (schema: unknown, value: unknown) => string[] {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
  addFormats(ajv);
  const local = (schema: unknown) => JSON.parse(JSON.stringify(schema).replaceAll('"#/components/schemas/', '"components#/$defs/'));
  ajv.addSchema({ $id: "components", $defs: local(document.components.schemas) });
  return (schema, value) => {
    const validate = ajv.compile(local(schema));
    return validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message ?? "is invalid"}`);
  };
}
