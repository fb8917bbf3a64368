import { describe, expect, test } from "bun:test";
import { newId } from "../../server/shared/ids.ts";

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const numberOf = (base32: string) => [...base32].reduce((n, ch) => n * 32n + BigInt(CROCKFORD.indexOf(ch)), 0n);

describe("ids", () => {
  test("ids of one millisecond count up by exactly one through every carry, and sort in the order made", () => {
    const now = Date.now();
    const ids = Array.from({ length: 40_000 }, () => newId("con", now));
    for (const id of ids) expect(id).toMatch(/^con_[0-9A-HJKMNP-TV-Z]{26}$/);
    const times = new Set(ids.map((id) => id.slice(4, 14)));
    expect(times.size).toBe(1);
    const steps = new Set<bigint>();
    for (let i = 1; i < ids.length; i++) steps.add(numberOf(ids[i]!.slice(14)) - numberOf(ids[i - 1]!.slice(14)));
    expect([...steps]).toEqual([1n]);
    expect([...ids].sort()).toEqual(ids);
  });

  test("a later millisecond starts from fresh random bits and sorts after", () => {
    // The millisecond after the last id's, not the clock's: ids never go back, and one made by
    // another test file in this process (a change stamped ahead of the clock) may be ahead of it.
    const first = newId("evt");
    const later = Number(numberOf(first.slice(4, 14))) + 1;
    const second = newId("evt", later);
    expect(second > first).toBe(true);
    expect(numberOf(second.slice(4, 14))).toBe(BigInt(later));
  });
});
