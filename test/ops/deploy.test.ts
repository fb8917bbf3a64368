import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DEFAULT_CONFIG, loadConfig } from "../../server/config.ts";
import { ISLANDS } from "../../console/bundle.ts";
import { createHarness } from "../support/harness.ts";
import { ROOT, tempDir } from "./support.ts";

const unit = readFileSync(join(ROOT, "deploy", "crm.service"), "utf8");

/** directive returns the value of a `Key=value` line of the unit, or undefined. */
function directive(key: string): string | undefined {
  return new RegExp(`^${key}=(.*)$`, "m").exec(unit)?.[1];
}

describe("deploy/crm.service", () => {
  test.skipIf(!Bun.which("systemd-analyze"))("systemd-analyze verify accepts it", () => {
    // verify insists that ExecStart's program exists; point it at one that does.
    const file = join(tempDir("unit"), "crm.service");
    writeFileSync(file, unit.replaceAll("/usr/local/bin/crm", process.execPath));
    const result = Bun.spawnSync(["systemd-analyze", "verify", "--man=no", file], { stdout: "pipe", stderr: "pipe" });
    expect(result.stderr.toString() + result.stdout.toString()).toBe("");
    expect(result.exitCode).toBe(0);
  });

  test("it agrees with the service: config file, data directory, permissions, stop timeout", () => {
    expect(directive("ExecStart")).toBe("/usr/local/bin/crm serve --config /etc/crm/crm.toml");
    const config = loadConfig(["--config", join(ROOT, "deploy", "crm.toml")], {});
    expect(config.dataDir).toBe(`/var/lib/${directive("StateDirectory")}`);
    expect([directive("StateDirectoryMode"), directive("UMask")]).toEqual(["0700", "0077"]);
    expect(Number(directive("TimeoutStopSec")) * 1000).toBeGreaterThan(DEFAULT_CONFIG.shutdownTimeoutMs);
    expect(directive("KillSignal")).toBe("SIGTERM");
    // The JIT needs writable code pages: this directive would crash the service at start.
    expect(directive("MemoryDenyWriteExecute")).toBeUndefined();
  });

  test("journald's rate limit is off for it: at its default level it logs a line per request, thousands a second under load, past journald's default burst, after which journald would drop every line, errors included", () => {
    expect(DEFAULT_CONFIG.logLevel).toBe("info");
    expect(directive("LogRateLimitIntervalSec")).toBe("0");
  });
});

describe("deploy/crm-instances.toml and deploy/nginx-instances.conf: two instances on PostgreSQL", () => {
  const nginx = readFileSync(join(ROOT, "deploy", "nginx-instances.conf"), "utf8");
  const databaseUrl = "postgres://crm:secret@db.internal:5432/crm";
  const file = join(ROOT, "deploy", "crm-instances.toml");
  // The URL file it names, /etc/crm/database-url, here a copy elsewhere: the file's other settings as they are.
  const urlFile = join(tempDir("instances"), "database-url");
  writeFileSync(urlFile, `${databaseUrl}\n`, { mode: 0o600 });
  const config = loadConfig(["--config", file, "--database-url-file", urlFile], {});

  test("the settings serve the shared database, its URL from a file every command given --config reads too, with the shared secrets key, on an address the load balancer reaches", () => {
    expect((Bun.TOML.parse(readFileSync(file, "utf8")) as Record<string, unknown>).database_url_file).toBe("/etc/crm/database-url");
    expect(config.databaseUrl).toBe(databaseUrl);
    expect(config.secretsKeyFile).toBe("/etc/crm/secrets.key");
    expect(config.host).toBe("0.0.0.0");
    expect(config.dataDir).toBe(`/var/lib/${directive("StateDirectory")}`);
  });

  test("the key file's comment tells a mode and owner the service takes without its warning (0600, the service's user), as the README's install line does", () => {
    const lines = readFileSync(file, "utf8").split("\n");
    const at = lines.findIndex((line) => line.startsWith("secrets_key_file ="));
    let start = at;
    while (start > 0 && lines[start - 1]!.startsWith("#")) start--;
    const comment = lines.slice(start, at).join("\n");
    const modes = [...comment.matchAll(/\b0[0-7]{3}\b/g)].map((m) => Number.parseInt(m[0], 8));
    expect({ modes: modes.length > 0, open: modes.filter((mode) => (mode & 0o077) !== 0).map((mode) => mode.toString(8)) }).toEqual({ modes: true, open: [] });
    expect(comment).toContain(`install -m 0600 -o ${directive("User")} -g ${directive("Group")}`);
  });

  test("nginx sends to two instances on the port they listen on, from the address they trust, and never retries a write on the other one", () => {
    const upstreams = [...nginx.matchAll(/^\s*server (\d+\.\d+\.\d+\.\d+):(\d+)/gm)];
    expect(upstreams.length).toBe(2);
    expect(upstreams.map((u) => Number(u[2]))).toEqual([config.port, config.port]);
    const balancer = /load balancer \((\d+\.\d+\.\d+\.\d+)\)/.exec(nginx)?.[1];
    expect(config.trustedProxies).toEqual([balancer!]);
    expect(nginx).toContain("proxy_set_header X-Forwarded-For $remote_addr;");
    expect(nginx).toContain("proxy_set_header X-Forwarded-Proto $scheme;");
    // nginx retries a POST, PATCH or DELETE on the next server only when told non_idempotent.
    expect(nginx).not.toContain("non_idempotent");
  });
});

describe("nginx in front: README's block and deploy/nginx-instances.conf", () => {
  const configs = {
    readme: /```nginx\n([\s\S]*?)```/.exec(readFileSync(join(ROOT, "README.md"), "utf8"))![1]!,
    instances: readFileSync(join(ROOT, "deploy", "nginx-instances.conf"), "utf8"),
  };

  test("they compress what the docs and the console send (the service never does), and not the API, whose ETags must stay strong for If-Match", async () => {
    const h = await createHarness();
    const typeOf = async (path: string) => (await h.app.handle(new Request(`http://localhost${path}`))).headers.get("content-type")!.split(";")[0]!;
    let sent: string[];
    try {
      const docsAssets = [...(await (await h.app.handle(new Request("http://localhost/docs"))).text()).matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
      sent = [...new Set(await Promise.all(["/docs/json", ...docsAssets, "/console/assets/console.css", ...ISLANDS.map((name) => `/console/assets/${name}.js`)].map(typeOf)))].sort();
    } finally {
      await h.close();
    }
    expect(sent).toEqual(["application/json", "text/css", "text/javascript"]);
    for (const config of Object.values(configs)) {
      const types = /^\s*gzip_types ([^;]*);/m.exec(config)![1]!.split(/\s+/);
      expect([/^\s*gzip on;/m.test(config), sent.filter((type) => !types.includes(type))]).toEqual([true, []]);
      // nginx turns a strong ETag weak when it compresses, and a weak one never matches If-Match.
      expect(/location \/public\/ \{[^}]*gzip off;[^}]*\}/.test(config)).toBe(true);
    }
  });

  test("every server block logs requests by path, without their query strings: ?email= and ?full_name= lookups, which the service keeps out of its own log", () => {
    // nginx's default format (combined) logs "$request", the request line with its query string.
    const query = /\$(request|request_uri|args|query_string|arg_\w+|http_referer)\b/;
    for (const config of Object.values(configs)) {
      const text = config.replace(/#.*$/gm, "");
      const formats = new Map([...text.matchAll(/^\s*log_format\s+(\S+)\s+([^;]*);/gm)].map((m) => [m[1]!, m[2]!]));
      const logging = serverBlocks(text).map((block) => {
        const logs = [...block.matchAll(/\baccess_log\s+([^;]*);/g)].map((m) => m[1]!.trim().split(/\s+/));
        // A block without access_log of its own writes the log nginx.conf names (Debian: access.log, combined).
        return (logs.length > 0 ? logs : [["inherited"]]).map(([path, format = "combined"]) => {
          if (path === "off") return "off";
          const fields = formats.get(format);
          return fields === undefined || query.test(fields) ? `${format}: with the query string` : fields.includes("$uri") ? "path only" : `${format}: no path`;
        });
      });
      expect(logging).toEqual([["path only"], ["path only"]]);
    }
  });
});

/** serverBlocks returns the text of each top-level `server { ... }` block of an nginx configuration without comments. */
function serverBlocks(text: string): string[] {
  const blocks: string[] = [];
  let depth = 0;
  let start = -1;
  for (let i = 0; i < text.length; i++) {
    if (depth === 0 && /^server\s*\{/.test(text.slice(i)) && !/\w/.test(text[i - 1] ?? "")) start = i;
    if (text[i] === "{") depth++;
    if (text[i] === "}" && --depth === 0 && start >= 0) {
      blocks.push(text.slice(start, i + 1));
      start = -1;
    }
  }
  return blocks;
}
