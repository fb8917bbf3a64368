import { afterEach, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { SOURCE, api, createToken, runCli, spawnServer, tempDir, type ServerProcess } from "./support.ts";

// The server remembers tokens it has authenticated; these tests hold it to refusing a token
// revoked by another process (the CLI) on the very next request, while traffic keeps it busy.
describe("token revocation while serving", () => {
  let server: ServerProcess | undefined;
  let dataDir = "";

  afterEach(async () => {
    await server?.stopWith("SIGTERM");
    server = undefined;
    rmSync(dataDir, { recursive: true, force: true });
  });

  test("a token revoked by `token revoke` mid-traffic is refused on its next request", async () => {
    dataDir = tempDir("revoke");
    const env = { PATH: process.env.PATH ?? "", CRM_RATE_READ_PER_SECOND: "100000", CRM_RATE_READ_BURST: "100000" };
    const kept = createToken(SOURCE, dataDir);
    const created = runCli([...SOURCE, "token", "create", "--name", "to-revoke", "--json", "--data-dir", dataDir]);
    expect(created.exitCode).toBe(0);
    const { token: revoked, id: revokedId } = JSON.parse(created.stdout) as { token: string; id: string };
    server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir], { env });
    const url = server.url;

    // Background traffic with both tokens keeps the server's token cache warm and busy.
    let stop = false;
    const statuses: number[] = [];
    const traffic = Promise.all(
      Array.from({ length: 8 }, async () => {
        while (!stop) statuses.push((await api(url, kept, "GET", "/public/v1/contacts?per_page=1")).status);
      }),
    );
    for (let i = 0; i < 20; i++) expect((await api(url, revoked, "GET", "/public/v1/contacts?per_page=1")).status).toBe(200);

    const result = runCli([...SOURCE, "token", "revoke", revokedId, "--data-dir", dataDir]);
    expect(result.exitCode).toBe(0);
    const next = await api(url, revoked, "GET", "/public/v1/contacts?per_page=1");
    stop = true;
    await traffic;

    expect(next.status).toBe(401);
    expect(next.body.detail).toBe("The API token is unknown or revoked.");
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect((await api(url, kept, "GET", "/public/v1/contacts")).status).toBe(200);
  });
});
