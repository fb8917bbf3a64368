/** Random is a seeded generator's draws: a float in [0, 1), an integer below n, one item, a chance, a few distinct items. */
export interface Random {
  next(): number;
  int(n: number): number;
  pick<T>(items: readonly T[]): T;
  chance(probability: number): boolean;
  subset<T>(items: readonly T[], most?: number): T[];
}

/** random is a small seeded generator (mulberry32), so a failing random test can be replayed from its seed. */
export function random(seed: number): Random {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return {
    next,
    int,
    pick: (items) => items[int(items.length)]!,
    chance: (probability) => next() < probability,
    subset(items, most = items.length) {
      const left = [...items];
      return Array.from({ length: int(Math.min(most, left.length) + 1) }, () => left.splice(int(left.length), 1)[0]!);
    },
  };
}
