import { MAX_JSON_DEPTH } from "../limits/limits.ts";
import { pointerSegment } from "../limits/service.ts";
import { ProblemError } from "../shared/problem.ts";

// JSON.parse keeps the last of two equal keys, nests as deep as its stack allows, rounds integers
// past 2^53 and turns 1e400 into Infinity, all silently. A forward-only scan refuses those texts
// (and keys that reach Object.prototype when a value is later merged) before JSON.parse builds it.

const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);
const SMALL_OBJECT_KEYS = 8; // below this a linear search beats hashing into a Set

/** isForbiddenKey tells whether a key is one refused anywhere in a body: __proto__, constructor or prototype. */
export function isForbiddenKey(key: string): boolean {
  return (key.length === 9 || key.length === 11) && FORBIDDEN_KEYS.has(key);
}

/** Thrown inside the scan when the text is not JSON; JSON.parse then words the error. */
const SYNTAX = Symbol("syntax");

function pointerOf(path: (string | number)[], depth: number, last?: string | number): string {
  const segments = path.slice(0, depth);
  if (last !== undefined) segments.push(last);
  return segments.map(pointerSegment).join("");
}

function refuse(pointer: string, detail: string): ProblemError {
  return new ProblemError(400, "invalid-json", `The request body is not acceptable JSON: ${pointer || "the body"} ${detail}.`, [{ pointer, detail }]);
}

function decodeString(literal: string): string {
  try {
    return JSON.parse(literal) as string;
  } catch {
    throw SYNTAX;
  }
}

/**
 * JsonScanner walks the text once, iteratively, and throws a 400 ProblemError for a duplicate
 * key, nesting deeper than MAX_JSON_DEPTH, a number that is not finite or beyond the safe
 * integer range, an escaped unpaired surrogate or NUL, or a __proto__ / constructor / prototype key.
 * It throws SYNTAX where the text is not JSON. A class, not closures: its state stays in fields
 * the JIT keeps in registers, which makes the scan about twice as fast.
 */
class JsonScanner {
  private i = 0;
  private depth = 0;
  /** position of the next backslash at or after the scan, or -1 */
  private nextBackslash: number;
  /** whether the string skipString last passed over had an escape */
  private escaped = false;
  private readonly path: (string | number)[] = [];
  /** per open container: the keys seen (objects) or null (arrays) */
  private readonly keys: (string[] | Set<string> | null)[] = [];
  private readonly keyLists: string[][] = [];

  constructor(private readonly text: string) {
    this.nextBackslash = text.indexOf("\\");
  }

  /** emptyKeyList reuses one array per depth, so a body of many small objects allocates no lists. */
  private emptyKeyList(depth: number): string[] {
    const list = (this.keyLists[depth] ??= []);
    list.length = 0;
    return list;
  }

  private skipWhitespace(): void {
    const text = this.text;
    let i = this.i;
    let c = text.charCodeAt(i);
    if (c > 0x20) return; // the common case in minified bodies: no whitespace at all
    for (; c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09; c = text.charCodeAt(++i));
    this.i = i;
  }

  private hex4(at: number): number {
    const digits = this.text.slice(at, at + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) throw SYNTAX;
    return Number.parseInt(digits, 16);
  }

  /** skipString moves past the string whose opening quote is at i; `depth` locates it in errors. */
  private skipString(depth: number): void {
    const text = this.text;
    let from = this.i + 1;
    this.escaped = false;
    for (;;) {
      const quote = text.indexOf('"', from);
      if (quote < 0) throw SYNTAX;
      // The next backslash is remembered across strings, so a lone one far ahead is searched for once.
      if (this.nextBackslash >= 0 && this.nextBackslash < from) this.nextBackslash = text.indexOf("\\", from);
      const backslash = this.nextBackslash;
      if (backslash < 0 || backslash > quote) {
        this.i = quote + 1;
        return;
      }
      this.escaped = true;
      from = backslash + 2;
      if (text.charCodeAt(backslash + 1) === 0x75 /* u */) {
        const code = this.hex4(backslash + 2);
        from = backslash + 6;
        if (code === 0) throw refuse(pointerOf(this.path, depth), "contains the NUL character (\\u0000), which no text field can hold");
        if (code >= 0xd800 && code <= 0xdfff) {
          const low = code <= 0xdbff && text.startsWith("\\u", from) ? this.hex4(from + 2) : -1;
          if (low < 0xdc00 || low > 0xdfff) throw refuse(pointerOf(this.path, depth), "contains an unpaired UTF-16 surrogate escape, which is not valid Unicode");
          from += 6;
        }
      }
      this.nextBackslash = text.indexOf("\\", from);
    }
  }

  /** readKey reads `"name" :` of an object member and checks the name. */
  private readKey(): void {
    const text = this.text;
    const start = this.i;
    if (text.charCodeAt(start) !== 0x22) throw SYNTAX;
    const at = this.depth - 1;
    this.skipString(at);
    const key = this.escaped ? decodeString(text.slice(start, this.i)) : text.slice(start + 1, this.i - 1);
    if (isForbiddenKey(key)) throw refuse(pointerOf(this.path, at, key), `uses the key ${JSON.stringify(key)}, which is refused to protect object prototypes`);
    const seen = this.keys[at]!;
    if (Array.isArray(seen)) {
      for (let k = 0; k < seen.length; k++) if (seen[k] === key) throw duplicate(this.path, at, key);
      seen.push(key);
      if (seen.length === SMALL_OBJECT_KEYS) this.keys[at] = new Set(seen);
    } else {
      if (seen.has(key)) throw duplicate(this.path, at, key);
      seen.add(key);
    }
    this.path[at] = key;
    this.skipWhitespace();
    if (text.charCodeAt(this.i) !== 0x3a /* : */) throw SYNTAX;
    this.i++;
    this.skipWhitespace();
  }

  private scanNumber(): void {
    const text = this.text;
    const start = this.i;
    let i = start;
    let plain = true;
    for (;; i++) {
      const c = text.charCodeAt(i);
      if ((c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e) continue;
      if (c === 0x65 || c === 0x45) plain = false;
      else break;
    }
    this.i = i;
    // 15 characters cannot spell a number beyond 2^53 without an exponent.
    if (plain && i - start <= 15) return;
    const value = Number(text.slice(start, i));
    if (Number.isNaN(value)) throw SYNTAX;
    if (!Number.isFinite(value)) throw refuse(pointerOf(this.path, this.depth), `is a number too large to represent (${text.slice(start, Math.min(i, start + 40))})`);
    // 1e-400 parses to 0: refused when the digits before any exponent are not all zero.
    if (value === 0 && /[1-9]/.test(text.slice(start, i).split(/[eE]/)[0]!)) {
      throw refuse(pointerOf(this.path, this.depth), `is a number too small to represent (${text.slice(start, Math.min(i, start + 40))}), which would be stored as 0; send it as a string`);
    }
    if (Math.abs(value) > Number.MAX_SAFE_INTEGER) {
      throw refuse(pointerOf(this.path, this.depth), `is a number beyond ±${Number.MAX_SAFE_INTEGER} (2^53 - 1), past which numbers lose precision; send it as a string`);
    }
  }

  /** scan checks the whole text. */
  scan(): void {
    const text = this.text;
    this.skipWhitespace();
    for (;;) {
      // A value starts at i.
      const c = text.charCodeAt(this.i);
      if (c === 0x22) {
        this.skipString(this.depth);
      } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
        if (this.depth === MAX_JSON_DEPTH) throw refuse(pointerOf(this.path, this.depth), `nests deeper than ${MAX_JSON_DEPTH} levels`);
        const isObject = c === 0x7b;
        this.keys[this.depth] = isObject ? this.emptyKeyList(this.depth) : null;
        this.depth++;
        this.i++;
        this.skipWhitespace();
        if (text.charCodeAt(this.i) === (isObject ? 0x7d : 0x5d)) {
          this.depth--;
          this.i++;
        } else {
          if (isObject) this.readKey();
          else this.path[this.depth - 1] = 0;
          continue;
        }
      } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
        this.scanNumber();
      } else if (text.startsWith("true", this.i) || text.startsWith("null", this.i)) {
        this.i += 4;
      } else if (text.startsWith("false", this.i)) {
        this.i += 5;
      } else {
        throw SYNTAX;
      }
      // After a value: close containers, or move on to the next member.
      for (;;) {
        this.skipWhitespace();
        if (this.depth === 0) {
          if (this.i !== text.length) throw SYNTAX;
          return;
        }
        const next = text.charCodeAt(this.i);
        const inObject = this.keys[this.depth - 1] !== null;
        if (next === 0x2c /* , */) {
          this.i++;
          this.skipWhitespace();
          if (inObject) this.readKey();
          else this.path[this.depth - 1] = (this.path[this.depth - 1] as number) + 1;
          break;
        }
        if (next !== (inObject ? 0x7d : 0x5d)) throw SYNTAX;
        this.depth--;
        this.i++;
      }
    }
  }
}

function duplicate(path: (string | number)[], depth: number, key: string): ProblemError {
  return refuse(pointerOf(path, depth, key), `appears twice in the same object (duplicate key ${JSON.stringify(key)})`);
}

/**
 * parseSafeJson parses a request body, refusing with 400 problem+json what JSON.parse would
 * accept silently: duplicate keys, nesting deeper than 32 levels, numbers beyond ±(2^53 - 1) or
 * not finite, unpaired surrogate escapes, the NUL character (PostgreSQL cannot store it in text,
 * SQLite would), and __proto__ / constructor / prototype keys.
 */
export function parseSafeJson(text: string): unknown {
  let malformed = false;
  try {
    new JsonScanner(text).scan();
  } catch (error) {
    if (error !== SYNTAX) throw error;
    malformed = true;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ProblemError(400, "invalid-json", `The request body is not valid JSON: ${(error as Error).message}`);
  }
  // The scan is stricter than JSON.parse nowhere on purpose; if it ever is, refuse rather than guess.
  if (malformed) throw new ProblemError(400, "invalid-json", "The request body is not valid JSON.");
  return value;
}
