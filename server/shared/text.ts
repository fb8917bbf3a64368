/** codePointName names a character by its code point, U+0009 style: readable where the character itself would not be. */
export function codePointName(character: string): string {
  return `U+${character.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
}

/**
 * printable shows a text's control characters (C0, DEL, C1) as \uXXXX escapes, for a line printed
 * on a terminal, where they would move the cursor, change colours or split the line.
 */
export function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
