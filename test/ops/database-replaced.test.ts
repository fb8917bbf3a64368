import { describe, expect, test } from "bun:test";
import { renameSync } from "node:fs";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { api, createToken, runCli, SOURCE, spawnServer, tempDir, waitUntil } from "./support.ts";

describe("a database file replaced under a running serve", () => {
  test("a backup moved over crm.sqlite while the service runs: the service notices, refuses writes (503 database-replaced), fails /readyz (naming the file to loopback only) and logs it once; reads go on, and no change answered 201 is lost at the restart", async () => {
    const dataDir = tempDir("replaced");
    const token = createToken(SOURCE, dataDir);
    const serve = [...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"];
    const server = await spawnServer(serve);
    let answered: { post: number; readyz: { status: number; body: any }; relayed: unknown; refused: any; read: number } | undefined;
    let createdAfter: string | null = null;
    try {
      expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Before" })).status).toBe(201);
      // The operator restores a backup by moving it over the live file (mv, install and rsync all give the path a new file).
      const backup = join(tempDir("replaced-backup"), "crm.sqlite");
      expect(runCli([...SOURCE, "backup", backup, "--data-dir", dataDir]).exitCode).toBe(0);
      renameSync(backup, join(dataDir, "crm.sqlite"));
      const readyz = async (headers: Record<string, string> = {}) => {
        const res = await fetch(`${server.url}/readyz`, { headers });
        return { status: res.status, body: await res.json() };
      };
      // The watch looks about once a second; a minute is the hang guard of a code that never notices.
      const deadline = Date.now() + 60_000;
      await waitUntil(async () => (await readyz()).status === 503 || Date.now() > deadline, "the replaced file to be noticed", server.proc);
      const post = await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "After" });
      if (post.status === 201) createdAfter = post.body.data.id;
      // Relayed by a proxy (the README's nginx passes /readyz on): the check's code only, not the file's path.
      answered = { post: post.status, readyz: await readyz(), relayed: (await readyz({ "x-forwarded-for": "203.0.113.7" })).body, refused: post.body, read: (await api(server.url, token, "GET", "/public/v1/contacts")).status };
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
          checks: { database: "storage-fault", migrations: "ok", delivery_loop: "ok" },
          reasons: { database: replacedText },
        },
      },
      relayed: {
        type: "urn:crm:problem:not-ready",
        title: "Service Unavailable",
        status: 503,
        detail: "Not ready: database: storage-fault. The service's log says why.",
        checks: { database: "storage-fault", migrations: "ok", delivery_loop: "ok" },
      },
      refused: {
        type: "urn:crm:problem:database-replaced",
        title: "Service Unavailable",
        status: 503,
        detail: "The service's database file was replaced or removed while the service ran, so this request was refused: nothing was changed. Retry after the operator has restarted the service.",
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

  // The slow-list lane's thread opened the path at its first slow read: opened after the move, it
  // paired the restored file with the lost file's WAL and shared memory, read the restored file,
  // and at the stop wrote the lost file's log into it ("database disk image is malformed", the
  // restart refused).
  for (const when of ["before the watch looks", "after the watch noticed"] as const) {
    test(`a slow list ${when}: it reads the lost file, as every read does, and the restored file is left whole`, async () => {
      const dataDir = tempDir("replaced-lane");
      const token = createToken(SOURCE, dataDir);
      const serve = [...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"];
      const server = await spawnServer(serve);
      const file = join(dataDir, "crm.sqlite");
      const counts = async () => {
        // A name search runs on the lane; a plain list on the main thread's reader.
        const lane = await api(server.url, token, "GET", "/public/v1/contacts?full_name=Hopper");
        const main = await api(server.url, token, "GET", "/public/v1/contacts?per_page=100");
        return { lane: [lane.status, lane.body.meta?.total], main: [main.status, main.body.meta?.total] };
      };
      let seen: Record<string, unknown>;
      try {
        expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "Ada", last_name: "Lovelace" })).status).toBe(201);
        // The lane's thread opens the file as serve starts, in the background: one slow list waits
        // for it, so that the move below comes after, as it does on a service that has been up a
        // moment (on a loaded machine the thread could otherwise open the restored file, refuse it,
        // and leave the list to a reader that is refused too: safe, but not the case tested here).
        expect((await api(server.url, token, "GET", "/public/v1/contacts?full_name=Lovelace")).status).toBe(200);
        const backup = join(tempDir("replaced-lane-backup"), "crm.sqlite");
        expect(runCli([...SOURCE, "backup", backup, "--data-dir", dataDir]).exitCode).toBe(0);
        // Written after the backup: in the lost file only.
        for (let i = 0; i < 30; i++) expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: `Grace${i}`, last_name: "Hopper" })).status).toBe(201);
        renameSync(backup, file);
        if (when === "after the watch noticed") await waitUntil(async () => (await fetch(`${server.url}/readyz`)).status === 503, "the replaced file to be noticed", server.proc);
        const first = await counts();
        await waitUntil(async () => (await fetch(`${server.url}/readyz`)).status === 503, "the replaced file to be noticed", server.proc);
        seen = { first, noticed: await counts() };
      } finally {
        expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
      }
      const check = new Database(file, { readonly: true });
      try {
        seen.integrity = check.query("PRAGMA integrity_check").all();
        seen.restoredContacts = check.query("SELECT first_name FROM contacts").all();
      } catch (error) {
        seen.integrity = String(error);
      } finally {
        check.close();
      }
      expect(seen).toEqual({
        first: { lane: [200, 30], main: [200, 31] },
        noticed: { lane: [200, 30], main: [200, 31] },
        integrity: [{ integrity_check: "ok" }],
        restoredContacts: [{ first_name: "Ada" }],
      });
      // The restart the README tells the operator to do serves the restored file.
      const restarted = await spawnServer(serve);
      try {
        expect((await api(restarted.url, token, "GET", "/public/v1/contacts")).body.data.map((c: { first_name: string }) => c.first_name)).toEqual(["Ada"]);
      } finally {
        expect((await restarted.stopWith("SIGTERM")).exitCode).toBe(0);
      }
    }, 120_000);
  }

  test("a name search after the watch noticed, with names still waiting for the name index: it indexes them in the lost file and finds them, as before the move", async () => {
    const dataDir = tempDir("replaced-names");
    const token = createToken(SOURCE, dataDir);
    const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warn"]);
    const file = join(dataDir, "crm.sqlite");
    let seen: Record<string, unknown>;
    try {
      for (let i = 0; i < 3; i++) expect((await api(server.url, token, "POST", "/public/v1/contacts", { first_name: `Grace${i}`, last_name: "Hopper" })).status).toBe(201);
      const backup = join(tempDir("replaced-names-backup"), "crm.sqlite");
      expect(runCli([...SOURCE, "backup", backup, "--data-dir", dataDir]).exitCode).toBe(0);
      // The service indexes waiting names every 250 ms, a loaded machine later: this connection,
      // opened on the file before the move, holds the write lock until the watch has noticed, and
      // then puts the names back on the waiting list, so that they are waiting whatever the timing.
      const lost = new Database(file);
      try {
        lost.run("PRAGMA busy_timeout = 10000");
        lost.run("BEGIN IMMEDIATE");
        renameSync(backup, file);
        await waitUntil(async () => (await fetch(`${server.url}/readyz`)).status === 503, "the replaced file to be noticed", server.proc);
        lost.run("DELETE FROM contacts_full_name WHERE rowid IN (SELECT rowid FROM contacts WHERE last_name = 'Hopper')");
        lost.run("INSERT OR IGNORE INTO contacts_full_name_pending (contact_rowid) SELECT rowid FROM contacts WHERE last_name = 'Hopper'");
        lost.run("COMMIT");
      } finally {
        lost.close();
      }
      const search = await api(server.url, token, "GET", "/public/v1/contacts?full_name=Hopper");
      seen = { search: [search.status, search.body.meta?.total], post: (await api(server.url, token, "POST", "/public/v1/contacts", { first_name: "After" })).status };
    } finally {
      expect((await server.stopWith("SIGTERM")).exitCode).toBe(0);
    }
    expect(seen).toEqual({ search: [200, 3], post: 503 });
  }, 120_000);
});
