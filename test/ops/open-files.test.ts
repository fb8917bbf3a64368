import { describe, expect, test } from "bun:test";
import { DESCRIPTOR_RESERVE } from "../../server/limits/open-files.ts";
import { Connection } from "../limits/support.ts";
import { createToken, SOURCE, spawnServer, tempDir } from "./support.ts";

/** LIMIT is the open-file limit (soft and hard, as `ulimit -n` sets them) the service is started under. */
const LIMIT = DESCRIPTOR_RESERVE + 12;

describe("open-file limit", () => {
  test("under a limit that cannot hold --max-connections, serve warns once naming both and answers 503 too-many-connections past the lowered cap instead of leaving clients unanswered", async () => {
    const dataDir = tempDir("open-files");
    const token = createToken(SOURCE, dataDir);
    const server = await spawnServer(["bash", "-c", `ulimit -n ${LIMIT} && exec "$0" "$@"`, ...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--max-connections", "100", "--max-connections-per-client", "100"]);
    const connections: Connection[] = [];
    try {
      const warnings = server.logLines().filter((line) => line.level === "warn" && "open_file_limit" in line);
      expect(warnings.map(({ msg, open_file_limit, max_connections, connections_served }) => ({ msg, open_file_limit, max_connections, connections_served }))).toEqual([
        {
          msg: `the open-file limit (${LIMIT}) cannot hold --max-connections 100 beside the service's own descriptors (${DESCRIPTOR_RESERVE}): at most 12 connections are served at once, the next get 503; raise the limit to ${100 + DESCRIPTOR_RESERVE} or more (LimitNOFILE= in the unit, ulimit -n before serve)`,
          open_file_limit: LIMIT,
          max_connections: 100,
          connections_served: 12,
        },
      ]);
      const port = Number(new URL(server.url).port);
      for (let i = 0; i < 12; i++) {
        const connection = new Connection(port);
        connections.push(connection);
        expect((await connection.request("GET", "/healthz")).status).toBe(200);
      }
      const past = new Connection(port);
      connections.push(past);
      const refused = await past.request("GET", "/public/v1/contacts", { authorization: `Bearer ${token}` });
      expect({ status: refused.status, body: JSON.parse(refused.body) }).toEqual({
        status: 503,
        body: {
          type: "urn:crm:problem:too-many-connections",
          title: "Service Unavailable",
          status: 503,
          detail: "The server is serving its limit of 12 connections. Retry shortly, or reuse a kept-alive connection.",
        },
      });
    } finally {
      for (const connection of connections) connection.destroy();
      await server.stopWith("SIGTERM");
    }
  });

  test("serve starts Bun's HTTP client without a proxy: with HTTP_PROXY and HTTPS_PROXY naming a proxy that never answers, it listens, and the proxy is sent nothing", async () => {
    let connected = 0;
    const proxy = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { open: () => void connected++, data: () => {} } });
    const dataDir = tempDir("open-files-proxy");
    const proxyUrl = `http://127.0.0.1:${proxy.port}`;
    try {
      const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir], {
        env: { PATH: process.env.PATH ?? "", HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, http_proxy: proxyUrl, https_proxy: proxyUrl },
      });
      expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
      await server.stopWith("SIGTERM");
      expect(connected).toBe(0);
    } finally {
      proxy.stop(true);
    }
  });
});
