const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

export type IdPrefix = "con" | "acc" | "usr" | "sub" | "evt" | "dlv" | "tok" | "att" | "opr" | "req";

let lastMs = 0;
let lastTimeText = encodeTime(0);
const lastRandom = new Uint8Array(10);

function encodeTime(ms: number): string {
  let out = "";
  for (let i = 0; i < 10; i++) {
    out = CROCKFORD[ms % 32] + out;
    ms = Math.floor(ms / 32);
  }
  return out;
}

function encodeRandom(bytes: Uint8Array): string {
  // 80 bits -> 16 base32 characters
  let out = "";
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += CROCKFORD[(buffer >> bits) & 31];
    }
    buffer &= (1 << bits) - 1;
  }
  return out;
}

/** newId returns a ULID-style id with a type prefix; ids made later sort after earlier ones, even within one millisecond. */
export function newId(prefix: IdPrefix, now = Date.now()): string {
  if (now <= lastMs) {
    // Same millisecond: increment the random part so ordering stays strict.
    for (let i = lastRandom.length - 1; i >= 0; i--) {
      lastRandom[i] = (lastRandom[i]! + 1) & 0xff;
      if (lastRandom[i] !== 0) break;
    }
  } else {
    lastMs = now;
    lastTimeText = encodeTime(now);
    crypto.getRandomValues(lastRandom);
    lastRandom[0]! &= 0x7f; // leave room to increment without overflow
  }
  return `${prefix}_${lastTimeText}${encodeRandom(lastRandom)}`;
}
