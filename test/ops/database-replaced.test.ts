import { describe, expect, test } from "bun:test";
import { renameSync } from "node:fs";
import { join } from "node:path";
import { api, createToken, runCli, SOURCE, spawnServer, tempDir, waitUntil } from "./support.ts";

describe("a database file replaced under a running serve", () => {
  test("a backup moved over crm.sqlite while the service runs: the service notices, refuses writes (503 database-replaced), fails /readyz and logs it once; reads go on, and no change answered 201 is lost at the restart", async () => {
    const dataDir = tempDir("replaced");
    const token = createToken(SOURCE, dataDir);
    const serve = [...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"];
    const server = await spawnServer(serve);
    let answered: { post: number; readyz: { status: number; body: any }; refused: any; read: number } | undefined;
    let createdAfter: string | null = null;
    try {
      expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Before" })).status).toBe(201);
      // The operator restores a backup by moving it over the live file (mv, install and rsync all give the path a new file).
      const backup = join(tempDir("replaced-backup"), "crm.sqlite");
      expect(runCli([...SOURCE, "backup", backup, "--data-dir", dataDir]).exitCode).toBe(0);
      renameSync(backup, join(dataDir, "crm.sqlite"));
      const readyz = async () => {
        const res = await fetch(`${server.url}/readyz`);
        return { status: res.status, body: await res.json() };
      };
      // The watch looks about once a second; a minute is the hang guard of a code that never notices.
      const deadline = Date.now() + 60_000;
      await waitUntil(async () => (await readyz()).status === 503 || Date.now() > deadline, "the replaced file to be noticed", server.proc);
      const post = await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "After" });
      if (post.status === 201) createdAfter = post.body.data.id;
      answered = { post: post.status, readyz: await readyz(), refused: post.body, read: (await api(server.url, token, "GET", "/public/v1/contacts")).status };
    } finally {
      expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
    }
    // After the restart, every change answered 201 is there: none was made on the file the service had lost.
    // (The restart before the fix applied the lost file's WAL, left at the path, to the restored file.)
    const restarted = await spawnServer(serve);
    let lostAtRestart: string[];
    let namesAtRestart: string[];
    try {
      const contacts: { id: string; first_name: string }[] = (await api(restarted.url, token, "GET", "/public/v1/contacts")).body.data;
      lostAtRestart = createdAfter !== null && !contacts.some((c) => c.id === createdAfter) ? [createdAfter] : [];
      namesAtRestart = contacts.map((c) => c.first_name);
    } finally {
      expect((await restarted.stopWith("SIGTERM")).exitCode).toBe(0);
    }
    const file = join(dataDir, "crm.sqlite");
    const replacedText = `the database file ${file} was replaced or removed while the service ran: it refuses changes until it is restarted, which opens the file now at that path`;
    expect({ ...answered, lostAtRestart, namesAtRestart }).toEqual({
      post: 503,
      readyz: {
        status: 503,
        body: {
          type: "urn:crm:problem:not-ready",
          title: "Service Unavailable",
          status: 503,
          detail: `Not ready: database: ${replacedText}.`,
          checks: { database: replacedText, migrations: "ok", delivery_loop: "ok" },
        },
      },
      refused: {
        type: "urn:crm:problem:database-replaced",
        title: "Service Unavailable",
        status: 503,
        detail: "The service's database file was replaced or removed while the service ran, so this change was refused: nothing was changed. Retry after the operator has restarted the service.",
      },
      read: 200,
      lostAtRestart: [],
      // The restored file, whole: the lost file's WAL was not applied to it.
      namesAtRestart: ["Before"],
    });
    // One error line says so, however many writes are refused after it.
    const lines = server.logLines().filter((line) => line.level === "error");
    expect(lines).toEqual([
      expect.objectContaining({
        msg: "the database file was replaced or removed under the running service: changes are refused (503 database-replaced) and /readyz fails until it is restarted; restart it to serve the file now at the path",
        path: file,
        removed: [`${file}-wal`, `${file}-shm`],
      }),
    ]);
  }, 120_000);
});
