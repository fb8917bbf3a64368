// bun bench/safe-json.ts: the safe JSON parser against plain JSON.parse on request-sized bodies.
// Prints the median time per parse of each and the overhead; bounded to a few seconds.
import { parseSafeJson } from "../server/http/safe-json.ts";

/** contactBody builds a contact body of about `bytes` bytes: nested custom fields, tags, extra properties and escapes. */
function contactBody(bytes: number): string {
  const body: Record<string, unknown> = { first_name: "Ada", last_name: "Lovelace", email: "ada@example.com", phone: "+44 20 7946 0000", tags: ["vip", "engine"] };
  for (let i = 0; JSON.stringify(body).length < bytes; i++) {
    body[`property_${i}`] = { note: `line ${i} with "quotes" and \\ back\u00e9slash`, score: i * 1.5, big: 900719925474099 - i, ok: i % 2 === 0, list: [i, i + 1, { k: "v" }], empty: null };
  }
  return JSON.stringify(body);
}

function median(run: () => void, iterations: number): number {
  const times: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    run();
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

for (const size of [1024, 100 * 1024, 1024 * 1024]) {
  const text = contactBody(size);
  const iterations = size >= 1024 * 1024 ? 200 : 2000;
  for (let i = 0; i < 200; i++) {
    JSON.parse(text);
    parseSafeJson(text);
  }
  const plain = median(() => JSON.parse(text), iterations);
  const safe = median(() => parseSafeJson(text), iterations);
  console.log(
    `${(text.length / 1024).toFixed(0).padStart(5)} KB body: JSON.parse ${(plain * 1000).toFixed(0).padStart(6)} µs, parseSafeJson ${(safe * 1000).toFixed(0).padStart(6)} µs (scan adds ${((safe - plain) * 1000).toFixed(0)} µs, ${(safe / plain).toFixed(2)}x)`,
  );
}
