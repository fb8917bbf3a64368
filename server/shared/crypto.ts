import { timingSafeEqual } from "node:crypto";

/** sha256 hashes text to its 32-byte digest (how secrets are kept at rest). */
export function sha256(text: string): Uint8Array {
  return Bun.SHA256.hash(text) as Uint8Array;
}

/** sameBytes compares two byte strings in constant time (timingSafeEqual throws on unequal lengths). */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && timingSafeEqual(a, b);
}

/** randomSecret draws 32 random bytes as base64url, 43 characters: session ids, CSRF seeds, sign-in codes and nonces. */
export function randomSecret(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}
