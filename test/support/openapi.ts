/** dereference answers what a `$ref` into components names (a schema, a response), or the object itself when it is inline. */
export function dereference(document: any, node: any): any {
  const ref: unknown = node?.$ref;
  if (typeof ref !== "string") return node;
  const [, kind, name] = /^#\/components\/(\w+)\/(.+)$/.exec(ref) ?? [];
  const target = kind && name ? document.components?.[kind]?.[name] : undefined;
  if (!target) throw new Error(`${ref} names nothing in components`);
  return target;
}
