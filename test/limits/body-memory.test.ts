import { afterEach, describe, expect, test } from "bun:test";
import { readFileSync, rmSync } from "node:fs";
import { createToken, SOURCE, spawnServer, tempDir, waitUntil, type ServerProcess } from "../ops/support.ts";
import { Connection, type RawResponse } from "./support.ts";

let server: ServerProcess | undefined;
let dataDir: string | undefined;
afterEach(async () => {
  await server?.stopWith("SIGKILL" as "SIGTERM");
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  server = undefined;
  dataDir = undefined;
});

/** rssMiB is a process's resident memory, from Linux's /proc. */
function rssMiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024;
}

const BUDGET_MIB = 8;
const CLIENTS = 64;

describe("request bodies in memory", () => {
  test("64 slow 1 MiB bodies with --body-buffer-max-mb 8: 56 get 503 with Retry-After from their head alone, and the server's memory grows by the 8 it holds, not 64", async () => {
    dataDir = tempDir("bodies");
    const token = createToken(SOURCE, dataDir);
    server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "error", `--body-buffer-max-mb=${BUDGET_MIB}`, "--max-connections-per-client=1024", "--body-timeout-ms=60000"]);
    const port = Number(new URL(server.url).port);
    const body = Buffer.alloc(1024 * 1024, "a");
    const before = rssMiB(server.proc.pid);

    const clients = Array.from({ length: CLIENTS }, () => new Connection(port));
    const answers: (RawResponse | null | undefined)[] = Array(CLIENTS).fill(undefined);
    for (const [i, c] of clients.entries()) {
      c.write(`POST /public/v1/contacts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`);
      c.response().then((r) => (answers[i] = r), () => (answers[i] = null));
    }
    const answered = () => answers.filter((a) => a !== undefined).length;
    await waitUntil(() => answered() >= CLIENTS - BUDGET_MIB, "the refusals", server.proc);
    const admitted = clients.filter((_, i) => answers[i] === undefined);
    // all but the last byte: bodies that are slow to finish
    for (const c of admitted) c.writeBytes(body.subarray(0, body.length - 1));
    await Promise.all(admitted.map((c) => c.drained()));
    // the largest resident size over a moment while the server takes the bytes in (a sampling window, not a timing)
    let peak = before;
    for (let i = 0; i < 40; i++) {
      peak = Math.max(peak, rssMiB(server.proc.pid));
      await Bun.sleep(25);
    }
    const refused = answers.filter((a) => a !== undefined);
    for (const c of clients) c.destroy();

    expect({ refused: refused.length, waiting: admitted.length }).toEqual({ refused: CLIENTS - BUDGET_MIB, waiting: BUDGET_MIB });
    for (const r of refused) {
      expect([r!.status, r!.headers["retry-after"], r!.headers.connection, JSON.parse(r!.body)]).toEqual([
        503,
        "1",
        "close",
        { type: "urn:crm:problem:body-buffer-full", title: "Service Unavailable", status: 503, detail: "The server holds its limit of 8 MiB of request bodies in memory. Retry shortly." },
      ]);
    }
    expect(peak - before).toBeLessThan(40);
  }, 30_000);
});
