/** codePointName names a character by its code point, U+0009 style: readable where the character itself would not be. */
export function codePointName(character: string): string {
  return `U+${character.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
}
