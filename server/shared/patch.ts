/**
 * applyPatch writes a patch into a JSON object, in place: a value replaces the key's, null removes
 * the key; keys in `skip` (fields kept elsewhere than in the object) are left alone.
 */
export function applyPatch(target: Record<string, unknown>, patch: object, skip?: ReadonlySet<string>): void {
  for (const [key, value] of Object.entries(patch)) {
    if (skip?.has(key)) continue;
    if (value === null) delete target[key];
    else target[key] = value;
  }
}
