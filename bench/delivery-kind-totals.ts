// Deliveries lists filtered by kind beside a status or a subscription (s32 plansqlite 4): this
// checkout against another (BENCH_AGAINST), each on its own copy of a data directory (the other
// checkout's schema may be older), alternating, in-process through app.handle. Also times a lookup
// by email sent 1 ms after the first list: on SQLite's main thread it waits for the list's total.
// usage: BENCH_AGAINST=/path/to/checkout bun bench/delivery-kind-totals.ts OUR_DATA_DIR THEIR_DATA_DIR [ROUNDS] [SUBSCRIPTION_ID]
import { join, resolve } from "node:path";
import { median } from "./paired.ts";

const [ourDir, theirDir] = [process.argv[2]!, process.argv[3]!];
const rounds = Number(process.argv[4] ?? 7);
const subscription = process.argv[5];

/** side opens a checkout's app on a data directory and returns a GET through it. */
async function side(checkout: string, dataDir: string) {
  const from = (path: string) => import(join(checkout, path));
  const [{ createApp, createRuntime }, { createApiToken }, { DEFAULT_CONFIG }, { databasePath, openDatabase }, { createLogger }] = await Promise.all(
    ["server/app.ts", "server/auth/service.ts", "server/config.ts", "server/db/database.ts", "server/shared/log.ts"].map(from),
  );
  const db = openDatabase(databasePath(dataDir), "normal");
  const rt = await createRuntime({ db, config: { ...DEFAULT_CONFIG, dataDir, logLevel: "error", rateReadBurst: 1e9, rateReadPerSecond: 1e9 }, log: createLogger("error") });
  const app = createApp(rt);
  const { token } = await createApiToken(db, "bench", Date.now(), { readPerSecond: 1e9, readBurst: 1e9, writePerSecond: 1e9, writeBurst: 1e9 });
  return async (path: string) => {
    const res = await app.handle(new Request(`http://localhost${path}`, { headers: { authorization: `Bearer ${token}` } }));
    return ((await res.json()) as { meta?: { total: number }; data: { id: string }[] });
  };
}

const sides = { ours: await side(resolve("."), ourDir), theirs: await side(resolve(process.env.BENCH_AGAINST!), theirDir) };
const LISTS = [
  "/public/v1/webhook-deliveries?event=contact.updated&status=succeeded",
  "/public/v1/webhook-deliveries?event=contact.updated&status=failed",
  "/public/v1/webhook-deliveries?event=contact.updated",
  ...(subscription ? [`/public/v1/webhook-deliveries?event=contact.updated&subscription_id=${subscription}`] : []),
];
const EMAIL = "/public/v1/contacts?email=contact123457%40example.com";
const times: Record<string, { ours: number[]; theirs: number[] }> = {};
const totals: Record<string, { ours: number; theirs: number }> = {};
for (const label of [...LISTS, "email beside"]) times[label] = { ours: [], theirs: [] };
for (let round = 0; round < rounds; round++) {
  const order = (round % 2 ? ["theirs", "ours"] : ["ours", "theirs"]) as ("ours" | "theirs")[];
  for (const path of LISTS) {
    for (const name of order) {
      const started = performance.now();
      const body = await sides[name](path);
      times[path]![name].push(performance.now() - started);
      (totals[path] ??= { ours: 0, theirs: 0 })[name] = body.meta!.total;
    }
  }
  for (const name of order) {
    // measured from when it is sent (1 ms after the list), not from when the event loop gets to it
    const planned = performance.now() + 1;
    const [, done] = await Promise.all([sides[name](LISTS[0]!), (async () => (await Bun.sleep(1), await sides[name](EMAIL), performance.now()))()]);
    times["email beside"]![name].push(done - planned);
  }
}
for (const [label, t] of Object.entries(times)) {
  console.log(`${label}${totals[label] ? ` (total ${totals[label]!.ours} / ${totals[label]!.theirs})` : ""}\n  ours ${median(t.ours).toFixed(1)} ms, theirs ${median(t.theirs).toFixed(1)} ms`);
}
process.exit(0);
