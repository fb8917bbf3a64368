/** codePointName names a character by its code point, U+0009 style: readable where the character itself would not be. */
export function codePointName(character: string): string {
  return `U+${character.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
}

/**
 * printable shows a text's control characters (C0, DEL, C1), line and paragraph separators and
 * bidirectional controls (marks, embeddings, overrides, isolates) as \uXXXX escapes, for a line
 * printed on a terminal or read by a line reader, where they would move the cursor, change colours
 * or split the line (U+0085 NEL and U+2028 end a line for Python's splitlines, Java's and .NET's
 * readers), or draw the rest of it backwards.
 */
export function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\p{Bidi_Control}]/gu, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** cutTo returns `value` if it has at most `limit` characters, else its start ending in "…", `limit` characters in all, no surrogate pair split. */
export function cutTo(value: string, limit: number): string {
  if (value.length <= limit) return value;
  const end = /[\uD800-\uDBFF]/.test(value[limit - 2]!) ? limit - 2 : limit - 1;
  return `${value.slice(0, end)}…`;
}

/** codePoints counts a text's characters as JSON Schema's patterns and lengths do: in code points, where JavaScript's length counts UTF-16 code units. */
export function codePoints(text: string): number {
  return [...text].length;
}

/**
 * withoutNul replaces each NUL character with U+FFFD: PostgreSQL's text cannot hold NUL, so text
 * from outside (a receiver's answer, rows older versions stored in SQLite) is stored this way.
 */
export function withoutNul(text: string): string {
  return text.replaceAll("\u0000", "\uFFFD");
}

/**
 * nameKey is the form of a name that lookups and sorts compare, the same on both backends (an
 * account's name_key; accountNameKey until it was shared): NFC, case folded in full in every script. Lowercased, upper-cased and lowercased
 * again, it folds what lowercasing alone keeps apart: ß, ẞ and SS (ẞ lowercases to ß, which
 * uppercases to SS), the ligature ﬀ and FF, final and medial sigma. NFC again at the end: a letter
 * that uppercases to several (ΐ to Ϊ́) comes back decomposed. The key cannot know a name's
 * language, so Turkish İ, I, ı and i are one letter: İ lowercases to i with a combining dot,
 * dropped, and ı uppercases to I (ISTANBUL finds İstanbul). White space is folded too (migration
 * 0050): each run of it, a no-break space (names pasted from web pages) or a doubled space, is one
 * space, and none at either end, so names that look alike in every list are one name.
 */
export function nameKey(name: string): string {
  return name.normalize("NFC").replace(/\p{White_Space}+/gu, " ").trim().toLowerCase().toUpperCase().toLowerCase().replaceAll("i\u0307", "i").normalize("NFC");
}
