import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { closeSync, constants as fsConstants, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { ConfigError, DEFAULT_CONFIG, SETTINGS, fileKey, isFlag, loadConfig, redactedUrl } from "../../server/config.ts";
import { databasePath, lockDataDirectory, openDatabase } from "../../server/db/database.ts";
import { MIGRATIONS, migrate } from "../../server/db/migrations.ts";
import { startServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { WRITE_METHODS } from "../../server/limits/api-rates.ts";
import { VERSION } from "../../server/version.ts";
import { ROOT, SOURCE, runCli, spawnServer, tempDir } from "./support.ts";

function configFile(text: string): string {
  const file = join(tempDir("config"), "crm.toml");
  writeFileSync(file, text);
  return file;
}

function configError(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error("expected a ConfigError");
}

const FILE = `
port = 4001
log_level = "warn"
metrics_token = "file-metrics-token-0001"
trusted_proxies = ["10.0.0.1", "::1"]
shutdown_timeout_ms = 2500
retry_schedule = [1, 2]
`;

describe("configuration: sources and precedence", () => {
  test("nothing given: every default", () => {
    expect(loadConfig([], {})).toEqual(DEFAULT_CONFIG);
  });

  test("the file fills what flags and environment leave unset; environment beats file; flags beat both", () => {
    const file = configFile(FILE);
    const config = loadConfig(["--config", file, "--port", "4003", "--shutdown-timeout-ms=900"], {
      PORT: "4002",
      CRM_METRICS_TOKEN: "env-metrics-token-0002",
      CRM_HOST: "0.0.0.0",
    });
    expect(config).toEqual({
      ...DEFAULT_CONFIG,
      host: "0.0.0.0",
      port: 4003,
      logLevel: "warn",
      metricsToken: "env-metrics-token-0002",
      trustedProxies: ["10.0.0.1", "::1"],
      shutdownTimeoutMs: 900,
      retrySchedule: [1, 2],
      // Held by the file, though the environment's is used: warned of when every user may read the file.
      configFileSecrets: { path: file, keys: ["metrics_token"] },
    });
  });

  test("a relative path in crm.toml (data_dir, secrets_key_file) is the file's directory's, wherever the command runs; a flag's or the environment's is the working directory's", () => {
    const file = configFile('data_dir = "var"\nsecrets_key_file = "../keys/secrets.key"\n');
    const home = dirname(file);
    expect(loadConfig(["--config", file], {})).toEqual({ ...DEFAULT_CONFIG, dataDir: join(home, "var"), secretsKeyFile: join(home, "..", "keys", "secrets.key") });
    const absolute = configFile('data_dir = "/var/lib/crm"\n');
    expect(loadConfig(["--config", absolute], {}).dataDir).toBe("/var/lib/crm");
    expect(loadConfig(["--config", file, "--data-dir", "here"], { CRM_SECRETS_KEY_FILE: "k" })).toEqual({ ...DEFAULT_CONFIG, dataDir: "here", secretsKeyFile: "k" });
  });

  test("a source run from the repository (npm start, npx bun server/main.ts ...) reads no .env there, as the binary reads none: a PORT or CRM_* line of one would change the service and every command", () => {
    const dotenv = join(ROOT, ".env");
    if (existsSync(dotenv)) throw new Error(`${dotenv} exists: this test writes its own there`);
    const empty = tempDir("dotenv");
    writeFileSync(dotenv, "CRM_LOG_LEVEL=loud\n");
    try {
      expect(runCli([...SOURCE, "token", "list", "--data-dir", empty]).stderr).toStartWith(`crm: no database at ${join(empty, "crm.sqlite")}; `);
    } finally {
      rmSync(dotenv, { force: true });
    }
  });

  test("CRM_CONFIG names the file; --config wins over it", () => {
    const fromEnv = configFile("port = 5001\n");
    const fromFlag = configFile("port = 5002\n");
    expect(loadConfig([], { CRM_CONFIG: fromEnv }).port).toBe(5001);
    expect(loadConfig(["--config", fromFlag], { CRM_CONFIG: fromEnv }).port).toBe(5002);
  });

  test("the ops settings parse from their environment variables", () => {
    const config = loadConfig([], { CRM_METRICS_TOKEN: "0123456789abcdef", CRM_SHUTDOWN_TIMEOUT_MS: "3000", CRM_TRUSTED_PROXIES: "127.0.0.1, ::ffff:10.1.2.3" });
    expect([config.metricsToken, config.shutdownTimeoutMs, config.trustedProxies]).toEqual(["0123456789abcdef", 3000, ["127.0.0.1", "::ffff:10.1.2.3"]]);
  });

  test("disable-failing-after-hours takes whole or fractional hours up to ten years, 0 for never; the secrets key file a path", () => {
    expect(loadConfig([], {}).disableFailingAfterHours).toBe(120);
    expect(loadConfig(["--disable-failing-after-hours", "0.001"], {}).disableFailingAfterHours).toBe(0.001);
    expect(loadConfig([], { CRM_DISABLE_FAILING_AFTER_HOURS: "48" }).disableFailingAfterHours).toBe(48);
    expect(loadConfig([], { CRM_DISABLE_FAILING_AFTER_HOURS: "0" }).disableFailingAfterHours).toBe(0);
    expect(loadConfig(["--disable-failing-after-hours", "87600"], {}).disableFailingAfterHours).toBe(87600);
    expect(loadConfig([], {}).secretsKeyFile).toBe("");
    expect(loadConfig([], { CRM_SECRETS_KEY_FILE: "/etc/crm/secrets.key" }).secretsKeyFile).toBe("/etc/crm/secrets.key");
  });

  test("synchronous is full by default and normal from a flag, the environment or the file", () => {
    expect(DEFAULT_CONFIG.synchronous).toBe("full");
    expect(loadConfig(["--synchronous", "normal"], {}).synchronous).toBe("normal");
    expect(loadConfig([], { CRM_SYNCHRONOUS: "normal" }).synchronous).toBe("normal");
    expect(loadConfig(["--config", configFile('synchronous = "normal"\n')], {}).synchronous).toBe("normal");
    expect(loadConfig(["--synchronous=full"], { CRM_SYNCHRONOUS: "normal" }).synchronous).toBe("full");
    expect(configError(() => loadConfig([], { CRM_SYNCHRONOUS: "off" }))).toBe('invalid CRM_SYNCHRONOUS: "off" is not one of full, normal');
  });

  test("the PostgreSQL database URL and pool come from a flag, the environment or the file; without a URL, SQLite", () => {
    expect([DEFAULT_CONFIG.databaseUrl, DEFAULT_CONFIG.databasePool]).toEqual(["", 10]);
    expect(loadConfig(["--database-url", "postgres://crm:pw@db.internal:5432/crm", "--database-pool=4"], {})).toEqual({
      ...DEFAULT_CONFIG,
      databaseUrl: "postgres://crm:pw@db.internal:5432/crm",
      databasePool: 4,
    });
    expect(loadConfig([], { CRM_DATABASE_URL: "postgresql://db/crm?sslmode=require", CRM_DATABASE_POOL: "25" })).toEqual({
      ...DEFAULT_CONFIG,
      databaseUrl: "postgresql://db/crm?sslmode=require",
      databasePool: 25,
    });
    const file = configFile('database_url = "postgres://crm@127.0.0.1/crm"\ndatabase_pool = 2\n');
    // Where the URL came from is kept for the messages that send the operator to it, and the hints that reach it without the password.
    expect(loadConfig(["--config", file], {})).toEqual({ ...DEFAULT_CONFIG, databaseUrl: "postgres://crm@127.0.0.1/crm", databaseUrlFrom: { named: `database_url in ${file}`, reach: ["--config", file] }, configFileSecrets: { path: file, keys: ["database_url"] }, databasePool: 2 });
    expect(loadConfig(["--config", file], { CRM_DATABASE_URL: "postgres://crm@db/crm" }).databaseUrlFrom).toEqual({ named: "--database-url, CRM_DATABASE_URL", reach: null });
  });

  test("database_url_file names a file holding the database URL on one line: crm.toml, which the service and every command read, names the database without holding its password", () => {
    const home = tempDir("url-file");
    const url = "postgres://crm:p%40ss@db.internal:5432/crm";
    writeFileSync(join(home, "database-url"), `${url}\n`, { mode: 0o600 });
    const file = join(home, "crm.toml");
    writeFileSync(file, 'database_url_file = "database-url"\n');
    const urlFile = join(home, "database-url");
    expect(loadConfig(["--config", file], {})).toEqual({ ...DEFAULT_CONFIG, databaseUrlFile: urlFile, databaseUrl: url, databaseUrlFrom: { named: `the file ${urlFile} that database_url_file in ${file} names`, reach: ["--config", file] } });
    expect(loadConfig([], { CRM_DATABASE_URL_FILE: urlFile })).toEqual({ ...DEFAULT_CONFIG, databaseUrlFile: urlFile, databaseUrl: url, databaseUrlFrom: { named: `the file ${urlFile} that CRM_DATABASE_URL_FILE names`, reach: ["--database-url-file", urlFile] } });
    expect(loadConfig(["--database-url-file", urlFile], {}).databaseUrlFrom).toEqual({ named: `the file ${urlFile} that --database-url-file names`, reach: ["--database-url-file", urlFile] });
    // The URL given both ways is refused: which one was meant is not guessed.
    const twice = "the database URL is given twice, by database_url (--database-url, CRM_DATABASE_URL) and by database_url_file (--database-url-file, CRM_DATABASE_URL_FILE); give one";
    expect(configError(() => loadConfig(["--config", file], { CRM_DATABASE_URL: url }))).toBe(twice);
    expect(configError(() => loadConfig(["--config", file, "--database-url", url], {}))).toBe(twice);
    const wrong = (text: string) => {
      writeFileSync(join(home, "wrong"), text);
      return configError(() => loadConfig(["--database-url-file", join(home, "wrong")], {}));
    };
    expect(wrong("")).toBe(`database URL file ${join(home, "wrong")} is empty: put the postgres:// URL in it, on one line`);
    expect(wrong(`${url}\n${url}\n`)).toBe(`database URL file ${join(home, "wrong")} holds more than one line: put the postgres:// URL in it, on one line`);
    const notUrl = (why: string) => `invalid database URL file ${join(home, "wrong")}: the value is not a postgres:// or postgresql:// URL (${why}); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE`;
    // The file holds the password, in whatever form was put there: no part of it is repeated.
    expect([
      wrong("mysql://crm:secret@db/crm"),
      wrong("jdbc:postgresql://db.internal:5432/crm?user=crm&password=S3cr3t-Pw"),
      wrong("host=db.internal port=5432 user=crm password=S3cr3t-Pw dbname=crm\n"),
      wrong("db.internal:5432:crm:crm:S3cr3t-Pw\n"),
      wrong("S3cr3t-Pw\n"),
      // crm.env's line moved as it was (upgrade note 12 says to move the URL), or the URL quoted.
      wrong("CRM_DATABASE_URL=postgres://crm:S3cr3t-Pw@db.internal:5432/crm\n"),
      wrong("CRM_DATABASE_URL='postgres://crm:S3cr3t-Pw@db.internal:5432/crm'\n"),
      wrong('"postgres://crm:S3cr3t-Pw@db.internal:5432/crm"\n'),
    ]).toEqual([
      notUrl("it is a URL of another kind"),
      notUrl("it is a URL of another kind"),
      notUrl("it looks like a libpq keyword string, host=... password=..."),
      notUrl("it looks like a .pgpass line, HOST:PORT:DATABASE:USER:PASSWORD"),
      notUrl("it is not a URL"),
      notUrl("it starts with a variable's name and =, as a line of crm.env does: the URL goes alone, without NAME= or quotes"),
      notUrl("it starts with a variable's name and =, as a line of crm.env does: the URL goes alone, without NAME= or quotes"),
      notUrl("it is in quotes: the URL goes alone, without them"),
    ]);
    expect(configError(() => loadConfig(["--database-url-file", join(home, "missing")], {}))).toBe(`database URL file ${join(home, "missing")} (--database-url-file, CRM_DATABASE_URL_FILE) does not exist`);
    expect(configError(() => loadConfig(["--database-url-file", home], {}))).toBe(`database URL file ${home} cannot be read: it is a directory, not a file`);
  });

  test("deploy/crm.toml, the example file, names every setting and loads as it is", () => {
    const example = join(ROOT, "deploy", "crm.toml");
    const text = readFileSync(example, "utf8");
    expect(SETTINGS.map(fileKey).filter((key) => !text.includes(`${key} =`))).toEqual([]);
    expect(loadConfig(["--config", example], {})).toEqual({ ...DEFAULT_CONFIG, host: "127.0.0.1", port: 3000, dataDir: "/var/lib/crm" });
  });
});

describe("configuration: invalid input names the setting", () => {
  test("each kind of mistake gets one precise message", () => {
    const unknownKey = configFile('prot = 3000\n');
    const badFileValue = configFile('log_level = "loud"\n');
    const notToml = configFile("port = = 1\n");
    expect(configError(() => loadConfig(["--prot", "1"], {}))).toBe("unknown option --prot (see --help)");
    expect(configError(() => loadConfig(["--config", unknownKey], {}))).toBe(`unknown setting prot in ${unknownKey}`);
    expect(configError(() => loadConfig(["--config", badFileValue], {}))).toBe(`invalid log_level in ${badFileValue}: "loud" is not one of debug, info, warn, error`);
    expect(configError(() => loadConfig(["--config", notToml], {}))).toStartWith(`config file ${notToml} is not valid TOML: `);
    const unquotedToken = configFile("metrics_token = c0ffee0123456789abcdef\n");
    expect(configError(() => loadConfig(["--config", unquotedToken], {}))).toBe(`config file ${unquotedToken} is not valid TOML: line 1: Strings must be quoted`);
    expect(configError(() => loadConfig(["--config", "/nonexistent/crm.toml"], {}))).toBe("config file /nonexistent/crm.toml does not exist");
    const folder = tempDir("config-folder");
    expect(configError(() => loadConfig(["--config", folder], {}))).toBe(`cannot read config file ${folder}: it is a directory, not a file`);
    expect(configError(() => loadConfig(["--port", "70000"], {}))).toBe('invalid --port: "70000" is not a port number (0-65535)');
    expect(configError(() => loadConfig([], { CRM_SHUTDOWN_TIMEOUT_MS: "0" }))).toBe('invalid CRM_SHUTDOWN_TIMEOUT_MS: "0" is not a positive whole number');
    expect(configError(() => loadConfig([], { CRM_DISABLE_FAILING_AFTER_HOURS: "87600.5" }))).toBe('invalid CRM_DISABLE_FAILING_AFTER_HOURS: "87600.5" is not a number from 0 to 87600');
    expect(configError(() => loadConfig(["--disable-failing-after-hours", "10000000000"], {}))).toBe('invalid --disable-failing-after-hours: "10000000000" is not a number from 0 to 87600');
    expect(configError(() => loadConfig(["--disable-failing-after-hours", "5 days"], {}))).toBe('invalid --disable-failing-after-hours: "5 days" is not a number (0 or more)');
    expect(configError(() => loadConfig(["--trusted-proxies", "10.0.0.1,proxy.local"], {}))).toBe('invalid --trusted-proxies: "10.0.0.1,proxy.local" is not a comma-separated list of IP addresses');
    expect(configError(() => loadConfig(["--port"], {}))).toBe("--port needs a value");
    // The value forgotten, the next option is not taken for it; written with = it is the value.
    expect(configError(() => loadConfig(["--data-dir", "--log-level", "warn"], {}))).toBe("--data-dir needs a value, not the option --log-level (for a value that starts with --, write --data-dir=--log-level)");
    expect(configError(() => loadConfig(["--config", "--port", "1"], {}))).toBe("--config needs a value, not the option --port (for a value that starts with --, write --config=--port)");
    expect(loadConfig(["--data-dir=--odd", "--log-level", "warn"], {})).toEqual({ ...DEFAULT_CONFIG, dataDir: "--odd", logLevel: "warn" });
    // A secret's next argument may be the secret itself: it is not repeated.
    expect(configError(() => loadConfig(["--metrics-token", "--a-secret-of-20-chars"], {}))).toBe("--metrics-token needs a value, not an option (for a value that starts with --, write --metrics-token=VALUE)");
  });

  test("an environment variable set but empty is refused for every setting, CRM_CONFIG too, naming it, rather than wiping out crm.toml's value (an empty CRM_DATABASE_URL chose SQLite)", () => {
    const file = configFile('database_url = "postgres://crm:pw@db.internal:5432/crm"\nmetrics_token = "0123456789abcdef0123"\ntrusted_proxies = ["10.0.0.1"]\nallow_private_targets = ["10.0.0.0/8"]\n');
    for (const setting of SETTINGS) {
      for (const empty of ["", " "]) {
        expect(configError(() => loadConfig(["--config", file], { [setting.env]: empty }))).toBe(
          `invalid ${setting.env}: it is set but empty; give it a value, or unset it to use ${fileKey(setting)} from the --config file or the default`,
        );
      }
    }
    expect(configError(() => loadConfig([], { CRM_CONFIG: "" }))).toBe("invalid CRM_CONFIG: it is set but empty; give it a file path, or unset it to read no config file");
    // A flag wins over the environment: an empty variable it overrides is never read.
    expect(loadConfig(["--config", file, "--metrics-token", "flag-metrics-token-01"], { CRM_METRICS_TOKEN: "", CRM_CONFIG: "" }).metricsToken).toBe("flag-metrics-token-01");
  });

  test("an empty value in crm.toml or on the command line is refused for every setting, as the environment's is: an unfilled template's database_url = \"\" served a new SQLite database of its own; an empty list is a list", () => {
    for (const setting of SETTINGS) {
      for (const empty of ["", " "]) {
        const file = configFile(`${fileKey(setting)} = ${JSON.stringify(empty)}\n`);
        expect(configError(() => loadConfig(["--config", file], {}))).toBe(`invalid ${fileKey(setting)} in ${file}: it is set but empty; give it a value, or remove the line to use the default`);
        const flagged = `invalid ${setting.flag}: it is set but empty; give it a value, or leave the option out to use ${setting.env}, ${fileKey(setting)} from the --config file or the default`;
        expect(configError(() => loadConfig([`${setting.flag}=${empty}`], {}))).toBe(flagged);
        if (!isFlag(setting)) expect(configError(() => loadConfig([setting.flag, empty], {}))).toBe(flagged);
      }
    }
    // A TOML list with nothing in it says so on purpose.
    expect(loadConfig(["--config", configFile("trusted_proxies = []\nallow_private_targets = []\n")], {})).toEqual(DEFAULT_CONFIG);
    // An empty item is the same unfilled template (trusted_proxies = ["${LB_IP}"], LB_IP unset), not a list with nothing in it.
    for (const line of ['trusted_proxies = [""]', 'trusted_proxies = ["  "]', 'trusted_proxies = ["10.0.0.1", ""]', 'allow_private_targets = [""]']) {
      const file = configFile(`${line}\n`);
      const key = line.split(" ")[0];
      expect(configError(() => loadConfig(["--config", file], {}))).toBe(`invalid ${key} in ${file}: an item of the list is set but empty; give it a value, or remove it (${key} = [] is a list with nothing in it)`);
    }
    const emptyItem = configFile('retry_schedule = [5, ""]\n');
    expect(configError(() => loadConfig(["--config", emptyItem], {}))).toBe(`invalid retry_schedule in ${emptyItem}: an item of the list is set but empty; give it a value, or remove it`);
    // A schedule with nothing in it is no schedule: a failed delivery is always retried, so it is refused saying what it needs.
    const noDelay = configFile("retry_schedule = []\n");
    expect(configError(() => loadConfig(["--config", noDelay], {}))).toBe(`invalid retry_schedule in ${noDelay}: the list is empty; give at least one delay in seconds (each 0 to 2592000: a failed delivery is always retried), or remove the line to use the default, 5,300,1800,7200,18000,36000,36000`);
  });

  test("a crm.toml that is not TOML is refused naming the line of the mistake: the first line from which no prefix of the file parses", () => {
    const cases: [string, number, string][] = [
      ["# the service's settings\n\nport = 4001\nlog_level = \"warn\"\ndata_dir = /var/lib/crm\nhost = \"0.0.0.0\"\n", 5, "Expected a value but found '/'"],
      ["port = 4001\n# twice\nport = 4002\n", 3, "Cannot redefine key 'port'"],
      // An array left open is named where it starts: every prefix that ends inside it fails too.
      ["port = 4001\nretry_schedule = [\n  1,\n  2\nhost = \"0.0.0.0\"\n", 2, "Expected ',' or ']' in an array but found 'h'"],
    ];
    for (const [text, line, words] of cases) {
      const file = configFile(text);
      expect(configError(() => loadConfig(["--config", file], {}))).toBe(`config file ${file} is not valid TOML: line ${line}: ${words}`);
    }
  });

  test("a setting's flag given twice, --config too, is refused naming it, not one of its values taken; a boolean setting takes =true or =false", () => {
    const twice = (name: string) => `${name} is given twice; give it once`;
    expect([
      configError(() => loadConfig(["--port", "1", "--port", "2"], {})),
      configError(() => loadConfig(["--port=1", "--log-level", "warn", "--port", "1"], {})),
      configError(() => loadConfig(["--allow-private-targets", "--allow-private-targets=false"], {})),
      configError(() => loadConfig(["--config", "a.toml", "--config=b.toml"], {})),
    ]).toEqual([twice("--port"), twice("--port"), twice("--allow-private-targets"), twice("--config")]);
    // Given once as a flag, it still wins over the environment.
    expect(loadConfig(["--port", "2"], { PORT: "1" }).port).toBe(2);
    expect([loadConfig(["--allow-private-targets=true"], {}).allowPrivateTargets, loadConfig(["--allow-private-targets=false"], {}).allowPrivateTargets]).toEqual([true, false]);
  });

  test("--allow-private-targets takes a boolean (1: every non-public address) or a comma-separated list of networks; anything else is refused in one line", () => {
    const asArray = configFile('allow_private_targets = ["10.0.0.0/8", "fd12::/16"]\n');
    const asText = configFile('allow_private_targets = "10.0.0.0/8, 192.168.4.0/24"\n');
    const on = configFile("allow_private_targets = true\n");
    expect([
      loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "1" }).allowPrivateTargets,
      loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "0" }).allowPrivateTargets,
      loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "10.0.0.0/8,fd12::/16" }).allowPrivateTargets,
      loadConfig(["--allow-private-targets"], {}).allowPrivateTargets,
      loadConfig(["--allow-private-targets=10.20.0.0/16,10.30.0.5", "--port", "1"], {}).allowPrivateTargets,
      loadConfig(["--config", asArray], {}).allowPrivateTargets,
      loadConfig(["--config", asText], {}).allowPrivateTargets,
      loadConfig(["--config", on], {}).allowPrivateTargets,
    ]).toEqual([true, false, ["10.0.0.0/8", "fd12::/16"], true, ["10.20.0.0/16", "10.30.0.5"], ["10.0.0.0/8", "fd12::/16"], ["10.0.0.0/8", "192.168.4.0/24"], true]);
    const invalid = (value: string, why: string) =>
      `invalid CRM_ALLOW_PRIVATE_TARGETS: ${JSON.stringify(value)} is not 1 (every non-public address) or a comma-separated list of networks such as 10.0.0.0/8,fd12::/16: ${why}`;
    expect([
      configError(() => loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "10.0.0.0/33" })),
      configError(() => loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "10.0.0.0/8,fd12::/129" })),
      configError(() => loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "10.1.0.0/8" })),
      configError(() => loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "corp.internal" })),
      configError(() => loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "10.0.0.0/8," })),
      configError(() => loadConfig([], { CRM_ALLOW_PRIVATE_TARGETS: "10.0.0.0/+8" })),
      configError(() => loadConfig(["--allow-private-targets", "10.0.0.0/8"], {})),
      // --allow-private-targets "$NETS" with NETS unset: the example is not the empty value, refused as empty after =.
      configError(() => loadConfig(["--allow-private-targets", ""], {})),
    ]).toEqual([
      invalid("10.0.0.0/33", "10.0.0.0/33 has a prefix longer than 32 bits"),
      invalid("10.0.0.0/8,fd12::/129", "fd12::/129 has a prefix longer than 128 bits"),
      invalid("10.1.0.0/8", "10.1.0.0/8 has address bits set past its /8 prefix"),
      invalid("corp.internal", "corp.internal is not an IP address or network"),
      invalid("10.0.0.0/8,", "an entry is empty"),
      invalid("10.0.0.0/+8", "10.0.0.0/+8 is not an IP address or network"),
      "--allow-private-targets takes its networks after =, as in --allow-private-targets=10.0.0.0/8 (alone it allows every non-public address)",
      "--allow-private-targets takes its networks after =, as in --allow-private-targets=NETWORKS (alone it allows every non-public address)",
    ]);
  });

  test("a crm.toml value of the wrong shape is refused, not turned into text: a table, a list for one value, a nested list", () => {
    const table = configFile("data_dir = { x = 1 }\n");
    const list = configFile('host = ["127.0.0.1"]\n');
    const nested = configFile("retry_schedule = [[1, 2], [3]]\n");
    expect(configError(() => loadConfig(["--config", table], {}))).toBe(`invalid data_dir in ${table}: expected a string, number or boolean, not a table`);
    expect(configError(() => loadConfig(["--config", list], {}))).toBe(`invalid host in ${list}: expected a string, number or boolean, not a list`);
    expect(configError(() => loadConfig(["--config", nested], {}))).toBe(`invalid retry_schedule in ${nested}: expected a list of numbers or strings, or one comma-separated string`);
    // A list setting takes a TOML array or one comma-separated string alike.
    const asArray = configFile('retry_schedule = [1, 2.5]\ntrusted_proxies = ["10.0.0.1", "10.0.0.2"]\n');
    const asText = configFile('retry_schedule = "1, 2.5"\ntrusted_proxies = "10.0.0.1,10.0.0.2"\n');
    const lists = { ...DEFAULT_CONFIG, retrySchedule: [1, 2.5], trustedProxies: ["10.0.0.1", "10.0.0.2"] };
    expect([loadConfig(["--config", asArray], {}), loadConfig(["--config", asText], {})]).toEqual([lists, lists]);
  });

  test("a crm.toml number TOML writes with an exponent or as inf is read as the number it is: accepted in range, else refused with the setting's range, never as not a number", () => {
    const tiny = configFile("disable_failing_after_hours = 1e-7\nretry_schedule = [5, 1e-7]\n");
    expect(loadConfig(["--config", tiny], {})).toEqual({ ...DEFAULT_CONFIG, disableFailingAfterHours: 1e-7, retrySchedule: [5, 1e-7] });
    const refused = (line: string) => configError(() => loadConfig(["--config", configFile(`${line}\n`)], {})).replace(/ in \S+:/, ":");
    expect(["port = 1e-7", "database_pool = 1e-7", "database_pool = 1e21", "shutdown_drain_ms = 2.5e-3", "disable_failing_after_hours = 1e21", "retry_schedule = [5, 1e7]", "slow_list_lane = inf", "disable_failing_after_hours = nan"].map(refused)).toEqual([
      'invalid port: "0.0000001" is not a port number (0-65535)',
      'invalid database_pool: "0.0000001" is not a positive whole number',
      'invalid database_pool: "1000000000000000000000" is not a whole number from 1 to 100',
      'invalid shutdown_drain_ms: "0.0025" is not a whole number (0 or more)',
      'invalid disable_failing_after_hours: "1000000000000000000000" is not a number from 0 to 87600',
      'invalid retry_schedule: "5,10000000" is not a comma-separated list of seconds, each from 0 to 2592000',
      'invalid slow_list_lane: "inf" is not a whole number (0 or more)',
      'invalid disable_failing_after_hours: "nan" is not a number (0 or more)',
    ]);
  });

  test("a number past a double (1e400 in crm.toml, which TOML reads as inf; 400 digits from a flag) is refused with a bounded setting's range, as 1e21 is", () => {
    const refused = (line: string) => configError(() => loadConfig(["--config", configFile(`${line}\n`)], {})).replace(/ in \S+:/, ":");
    expect(["delivery_retention_days = 1e400", "disable_failing_after_hours = 1e400", "database_pool = 1e400", "retry_schedule = [5, 1e400]", "slow_list_lane = 1e400"].map(refused)).toEqual([
      'invalid delivery_retention_days: "inf" is not a whole number from 1 to 3650',
      'invalid disable_failing_after_hours: "inf" is not a number from 0 to 87600',
      'invalid database_pool: "inf" is not a whole number from 1 to 100',
      'invalid retry_schedule: "5,inf" is not a comma-separated list of seconds, each from 0 to 2592000',
      'invalid slow_list_lane: "inf" is not a whole number (0 or more)',
    ]);
    const huge = `1${"0".repeat(400)}`;
    expect(configError(() => loadConfig(["--disable-failing-after-hours", huge], {}))).toBe(`invalid --disable-failing-after-hours: "${huge}" is not a number from 0 to 87600`);
  });

  test("a database URL that is not postgres:// or postgresql:// names the setting and says what it is instead, never repeating it: it may be the password in another form", () => {
    expect(redactedUrl("postgres://crm:hunter2@db.example:5433/crm?sslmode=require")).toBe("postgres://crm:***@db.example:5433/crm?sslmode=require");
    expect(redactedUrl("postgresql://crm@db/crm?password=hunter2&sslmode=require")).toBe("postgresql://crm@db/crm?password=***&sslmode=require");
    // The rest of the query as written: rewritten whole, options=-c%20... showed as -c+..., which libpq reads as a plus.
    expect(redactedUrl("postgres://crm@db/crm?sslmode=verify-full&sslkey=/k.pem&sslpassword=hunter2")).toBe("postgres://crm@db/crm?sslmode=verify-full&sslkey=/k.pem&sslpassword=***");
    expect(redactedUrl("postgres://crm:hunter2@db/crm?options=-c%20statement_timeout%3D0&password=hunter3&application_name=a+b")).toBe("postgres://crm:***@db/crm?options=-c%20statement_timeout%3D0&password=***&application_name=a+b");
    // A parameter's name is read decoded, as libpq reads it: pass%77ord is the password too.
    expect(redactedUrl("postgres://crm@db/crm?pass%77ord=hunter2&SSLPASSWORD=hunter3&password")).toBe("postgres://crm@db/crm?pass%77ord=***&SSLPASSWORD=***&password");
    const notUrl = (source: string, why: string) => `invalid ${source}: the value is not a postgres:// or postgresql:// URL (${why}); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE`;
    expect(configError(() => loadConfig(["--database-url", "mysql://crm:hunter2@db/crm"], {}))).toBe(notUrl("--database-url", "it is a URL of another kind"));
    expect(configError(() => loadConfig([], { CRM_DATABASE_URL: "db.internal:5432" }))).toBe(notUrl("CRM_DATABASE_URL", "it is not a URL"));
    expect(configError(() => loadConfig([], { CRM_DATABASE_URL: "crm:hunter2@db/crm" }))).toBe(notUrl("CRM_DATABASE_URL", "it is not a URL"));
    const file = configFile('database_url = "sqlite:///var/lib/crm"\n');
    expect(configError(() => loadConfig(["--config", file], {}))).toBe(notUrl(`database_url in ${file}`, "it is a URL of another kind"));
  });

  test("a database URL missing a slash (so without a host) is refused, by every command, and never printed with its password", () => {
    // postgres: is no special scheme to URL: with a slash missing, the rest parses as a path and the password is no password.
    expect(redactedUrl("postgres:/crm:hunter2@db.internal:5432/crm")).toBe("postgres:/***@db.internal:5432/crm");
    expect(redactedUrl("postgres:crm:hunter2@db/crm?sslpassword=hunter3")).toBe("postgres:***@db/crm?sslpassword=***");
    expect(redactedUrl("postgresql:///crm:hunter2@db/crm")).toBe("postgresql:///***@db/crm");
    expect(redactedUrl("postgres:///crm?password=hunter2")).toBe("postgres:///crm?password=***");
    // Nor is it repeated in the refusal, redacted or not, as no value that is not a postgres:// URL with a host is.
    const noHost = "invalid CRM_DATABASE_URL: the value is not a postgres:// URL with a host (is a slash missing after postgres:?); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE";
    expect(configError(() => loadConfig([], { CRM_DATABASE_URL: "postgres:/crm:hunter2@db.internal:5432/crm" }))).toBe(noHost);
    expect(configError(() => loadConfig([], { CRM_DATABASE_URL: "postgres:\\\\crm:hunter2@db/crm" }))).toBe(noHost);
    expect(configError(() => loadConfig([], { CRM_DATABASE_URL: "postgres:///crm" }))).toBe(noHost);
    const dir = tempDir("url-typo");
    const key = join(dir, "secrets.key");
    writeFileSync(key, `${Buffer.alloc(32, 7).toString("base64")}\n`, { mode: 0o600 });
    for (const url of ["postgres:/crm:Sekr1tPW@db.invalid:5432/crm", "postgres:crm:Sekr1tPW@db.invalid/crm", "postgres:///crm:Sekr1tPW@db.invalid/crm"]) {
      const run = runCli([...SOURCE, "token", "list", "--secrets-key-file", key], { env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: url } });
      expect({ exitCode: run.exitCode, stdout: run.stdout, stderr: run.stderr }).toEqual({ exitCode: 2, stdout: "", stderr: `crm: ${noHost}\n` });
      expect(run.stderr).not.toContain("Sekr1tPW");
    }
  }, 60_000);

  test("a password with a /, ? or # not percent-encoded, after digits, is refused and never printed: URL takes the user for the host and the digits for its port", () => {
    // postgres://crm:2024/Summer@db/crm parses as host crm, port 2024, path /Summer@db/crm: no password to hide.
    expect(redactedUrl("postgres://crm:2024/Summer@db.internal:5432/crm")).toBe("postgres://***@db.internal:5432/crm");
    expect(redactedUrl("postgresql://crm:12?ss@db/crm")).toBe("postgresql://***@db/crm");
    expect(redactedUrl("postgres://crm:12#ss@db/crm")).toBe("postgres://***@db/crm");
    // An @ in the query of a URL with its user where it belongs is no password's.
    expect(redactedUrl("postgres://crm:hunter2@db/crm?application_name=crm@vm1")).toBe("postgres://crm:***@db/crm?application_name=crm@vm1");
    const cutShort = (shown: string) => `invalid CRM_DATABASE_URL: ${JSON.stringify(shown)} is not a postgres:// URL whose user and password are percent-encoded (an @ after the host: write each /, ?, # and @ in them as %2F, %3F, %23, %40)`;
    for (const url of ["postgres://crm:2024/Summer@db.internal:5432/crm", "postgres://crm:12?ss@db/crm", "postgres://crm:12#ss@db/crm"]) {
      expect(configError(() => loadConfig([], { CRM_DATABASE_URL: url }))).toBe(cutShort(redactedUrl(url)));
    }
    expect(loadConfig([], { CRM_DATABASE_URL: "postgres://crm:2024%2FSummer@db.internal:5432/crm" }).databaseUrl).toBe("postgres://crm:2024%2FSummer@db.internal:5432/crm");
  });

  test("a database URL whose port is out of range names the port, without the password", () => {
    expect(configError(() => loadConfig(["--database-url", "postgres://u:p@h:99999/d"], {}))).toBe('invalid --database-url: "postgres://***@h:99999/d" has port 99999; the port must be 1 to 65535');
    expect(configError(() => loadConfig([], { CRM_DATABASE_URL: "postgresql://crm:hunter2@[::1]:65536/crm" }))).toBe('invalid CRM_DATABASE_URL: "postgresql://***@[::1]:65536/crm" has port 65536; the port must be 1 to 65535');
    expect(configError(() => loadConfig(["--database-url", "postgres://crm:hunter2@db:0/crm"], {}))).toBe('invalid --database-url: "postgres://crm:***@db:0/crm" has port 0; the port must be 1 to 65535');
    expect(loadConfig(["--database-url", "postgres://crm:hunter2@db:65535/crm"], {}).databaseUrl).toBe("postgres://crm:hunter2@db:65535/crm");
  });

  test("the database pool takes 1 to 100 connections", () => {
    expect(loadConfig(["--database-pool", "100"], {}).databasePool).toBe(100);
    expect(configError(() => loadConfig(["--database-pool", "0"], {}))).toBe('invalid --database-pool: "0" is not a positive whole number');
    expect(configError(() => loadConfig([], { CRM_DATABASE_POOL: "101" }))).toBe('invalid CRM_DATABASE_POOL: "101" is not a whole number from 1 to 100');
  });

  test("a millisecond setting a timer waits on takes at most a day; 3000000000, which a timer would cut to 1 ms, is refused", () => {
    for (const [flag, env, least] of [["--body-timeout-ms", "CRM_BODY_TIMEOUT_MS", 1], ["--shutdown-timeout-ms", "CRM_SHUTDOWN_TIMEOUT_MS", 1], ["--shutdown-drain-ms", "CRM_SHUTDOWN_DRAIN_MS", 0], ["--delivery-timeout-ms", "CRM_DELIVERY_TIMEOUT_MS", 1]] as const) {
      expect([
        configError(() => loadConfig([flag, "3000000000"], {})),
        configError(() => loadConfig([], { [env]: "86400001" })),
        configError(() => loadConfig(["--config", configFile(`${flag.slice(2).replaceAll("-", "_")} = 2147483648\n`)], {})).replace(/ in \S+:/, ":"),
      ]).toEqual([
        `invalid ${flag}: "3000000000" is not a whole number from ${least} to 86400000`,
        `invalid ${env}: "86400001" is not a whole number from ${least} to 86400000`,
        `invalid ${flag.slice(2).replaceAll("-", "_")}: "2147483648" is not a whole number from ${least} to 86400000`,
      ]);
    }
    const longest = ["--body-timeout-ms", "86400000", "--shutdown-timeout-ms", "86400000", "--shutdown-drain-ms", "86400000", "--delivery-timeout-ms", "86400000"];
    expect(loadConfig(longest, {})).toEqual({ ...DEFAULT_CONFIG, bodyTimeoutMs: 86400000, shutdownTimeoutMs: 86400000, shutdownDrainMs: 86400000, deliveryTimeoutMs: 86400000 });
  });

  test("a retention in days takes at most ten years, from a flag, the environment or crm.toml alike, as --help and README say", () => {
    for (const [flag, env] of [["--delivery-retention-days", "CRM_DELIVERY_RETENTION_DAYS"], ["--tombstone-retention-days", "CRM_TOMBSTONE_RETENTION_DAYS"]] as const) {
      const key = flag.slice(2).replaceAll("-", "_");
      const file = configFile(`${key} = 1000000000\n`);
      expect([
        configError(() => loadConfig([flag, "3651"], {})),
        configError(() => loadConfig([], { [env]: "9007199254740991" })),
        configError(() => loadConfig(["--config", file], {})),
        loadConfig([flag, "3650"], {})[SETTINGS.find((s) => s.flag === flag)!.key],
      ]).toEqual([
        `invalid ${flag}: "3651" is not a whole number from 1 to 3650`,
        `invalid ${env}: "9007199254740991" is not a whole number from 1 to 3650`,
        `invalid ${key} in ${file}: "1000000000" is not a whole number from 1 to 3650`,
        3650,
      ]);
    }
  });

  test("a retry delay takes at most 30 days; a longer one, which could put the next attempt past any timestamp, is refused", () => {
    expect(loadConfig(["--retry-schedule", "5,2592000"], {}).retrySchedule).toEqual([5, 2592000]);
    expect([
      configError(() => loadConfig(["--retry-schedule", "99999999999999999999"], {})),
      configError(() => loadConfig([], { CRM_RETRY_SCHEDULE: "5, 2592000.5" })),
      configError(() => loadConfig(["--retry-schedule", "5,x"], {})),
    ]).toEqual([
      'invalid --retry-schedule: "99999999999999999999" is not a comma-separated list of seconds, each from 0 to 2592000',
      'invalid CRM_RETRY_SCHEDULE: "5, 2592000.5" is not a comma-separated list of seconds, each from 0 to 2592000',
      'invalid --retry-schedule: "5,x" is not a comma-separated list of seconds',
    ]);
  });

  test("a malformed metrics token is refused without being echoed, the refusal saying what it must be: ASCII too, as --help and README say", () => {
    const refused = ["short secret", "métrics-token-of-enough-length"].map((value) => configError(() => loadConfig([], { CRM_METRICS_TOKEN: value })));
    const rule = "16 to 200 printable ASCII characters without spaces";
    expect(refused).toEqual([`invalid CRM_METRICS_TOKEN: the value is not ${rule}`, `invalid CRM_METRICS_TOKEN: the value is not ${rule}`]);
    expect(SETTINGS.find((s) => s.flag === "--metrics-token")!.help).toContain(`(${rule})`);
  });

  test("serve stops before touching anything: exit 2, one line on stderr, nothing on stdout, no data directory", () => {
    const dataDir = join(tempDir("cli"), "data");
    const cases: [string[], Record<string, string>, string][] = [
      [["serve", "--port", "70000"], {}, 'crm: invalid --port: "70000" is not a port number (0-65535)\n'],
      [["serve"], { CRM_LOG_LEVEL: "loud" }, 'crm: invalid CRM_LOG_LEVEL: "loud" is not one of debug, info, warn, error\n'],
      [["serve", "--config", "missing.toml"], {}, "crm: config file missing.toml does not exist\n"],
      [["serve", "--metrics-token", "x"], {}, "crm: invalid --metrics-token: the value is not 16 to 200 printable ASCII characters without spaces\n"],
      [["serve", "--body-timeout-ms", "3000000000"], {}, 'crm: invalid --body-timeout-ms: "3000000000" is not a whole number from 1 to 86400000\n'],
      [["serve"], { CRM_TOMBSTONE_RETENTION_DAYS: "36500" }, 'crm: invalid CRM_TOMBSTONE_RETENTION_DAYS: "36500" is not a whole number from 1 to 3650\n'],
    ];
    for (const [args, env, line] of cases) {
      const result = runCli([...SOURCE, ...args], { env: { PATH: process.env.PATH ?? "", CRM_DATA_DIR: dataDir, ...env } });
      expect({ exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr }).toEqual({ exitCode: 2, stdout: "", stderr: line });
    }
    expect(existsSync(dataDir)).toBe(false);
  });

  test("a CRM_ environment variable that names no setting (CRM_PORT, the port's being PORT; a misspelt one) is warned of, by every command and by serve, rather than ignored with nothing said", async () => {
    const empty = tempDir("unknown-env");
    const env = { PATH: process.env.PATH ?? "", CRM_PORT: "4000", CRM_DATABSE_URL: "postgres://crm@db.internal/crm", CRM_LOG_LEVEL: "warn" };
    const warning = "CRM_DATABSE_URL, CRM_PORT in the environment name no setting and are ignored (the port's variable is PORT); --help lists the settings' variables";
    const lines = runCli([...SOURCE, "token", "list", "--data-dir", empty], { env }).stderr.split("\n");
    expect(lines[0]).toBe(`crm: ${warning}`);
    expect(lines[1]).toStartWith(`crm: no database at ${join(empty, "crm.sqlite")}; `);
    const one = runCli([...SOURCE, "token", "list", "--data-dir", empty], { env: { PATH: process.env.PATH ?? "", CRM_DATA_DIRECTORY: "/var/lib/crm" } }).stderr;
    expect(one.split("\n")[0]).toBe("crm: CRM_DATA_DIRECTORY in the environment names no setting and is ignored; --help lists the settings' variables");
    const server = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", tempDir("unknown-env-serve")], { env });
    try {
      expect(server.output()).toContain(warning);
    } finally {
      server.proc.kill();
      await server.waitForExit(15_000);
    }
  }, 30_000);

  test("the CRM_ variables this repository's README and client README tell users to set for its other programs (the client, the example receiver, the tests) are not warned of as misspelt settings", () => {
    const empty = tempDir("documented-env");
    const env = {
      PATH: process.env.PATH ?? "",
      CRM_URL: "http://127.0.0.1:3000",
      CRM_TOKEN: "crm_example",
      CRM_WEBHOOK_SECRET: "whsec_example",
      CRM_TEST_BACKEND: "postgres",
      CRM_TEST_CHROMIUM: "npm",
      CRM_DATABSE_URL: "postgres://crm@db.internal/crm",
    };
    const lines = runCli([...SOURCE, "token", "list", "--data-dir", empty], { env }).stderr.split("\n");
    expect(lines[0]).toBe("crm: CRM_DATABSE_URL in the environment names no setting and is ignored; --help lists the settings' variables");
    expect(lines[1]).toStartWith(`crm: no database at ${join(empty, "crm.sqlite")}; `);
  });

  test("a port already in use is one line, not a stack trace, for an IPv6 --host in brackets too", () => {
    const busy = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("busy") });
    const busyV6 = Bun.serve({ hostname: "::1", port: 0, fetch: () => new Response("busy") });
    try {
      const result = runCli([...SOURCE, "serve", "--port", String(busy.port), "--data-dir", tempDir("busy")]);
      expect(result.exitCode).toBe(2);
      expect(result.stderr).toBe(`crm: cannot listen on "127.0.0.1" port ${busy.port} (--host, --port): Failed to start server. Is port ${busy.port} in use?\n`);
      // A bracketed address is an address, not a name to look up: the refusal is the port's.
      const bracketed = runCli([...SOURCE, "serve", "--host", "[::1]", "--port", String(busyV6.port), "--data-dir", tempDir("busy-v6")]);
      expect({ exitCode: bracketed.exitCode, stderr: bracketed.stderr }).toEqual({ exitCode: 2, stderr: `crm: cannot listen on "[::1]" port ${busyV6.port} (--host, --port): Failed to start server. Is port ${busyV6.port} in use?\n` });
    } finally {
      busy.stop(true);
      busyV6.stop(true);
    }
  });

  test("a host that does not resolve, or a database file that is not one, is one line naming the setting, not a stack trace", () => {
    // Bun's listen fails on a name that does not resolve with an errno of its own, "ENOENT: no such file or directory" for the first.
    for (const host of ["no-such-host.invalid", "exa mple"]) {
      const unresolved = runCli([...SOURCE, "serve", "--port", "0", "--host", host, "--data-dir", tempDir("host")]);
      expect({ exitCode: unresolved.exitCode, stderr: unresolved.stderr }).toEqual({ exitCode: 2, stderr: `crm: cannot listen on ${JSON.stringify(host)} (--host): the name does not resolve to an address\n` });
    }
    const garbled = tempDir("garbled");
    mkdirSync(garbled, { recursive: true });
    writeFileSync(join(garbled, "crm.sqlite"), randomBytes(8192));
    for (const command of [["serve", "--port", "0"], ["token", "list"]]) {
      const result = runCli([...SOURCE, ...command, "--data-dir", garbled]);
      expect({ exitCode: result.exitCode, stderr: result.stderr }).toEqual({ exitCode: 2, stderr: `crm: cannot open the database ${join(garbled, "crm.sqlite")} (--data-dir, CRM_DATA_DIR): file is not a database\n` });
    }
  });

  test("a migration that fails, or a lock file the service cannot open, is one line naming it, not a stack trace", () => {
    const dataDir = tempDir("failing-migration");
    expect(runCli([...SOURCE, "migrate", "--data-dir", dataDir]).exitCode).toBe(0);
    const db = new Database(join(dataDir, "crm.sqlite"));
    // As a hand-made change would: what a migration makes (0026 adds a column) is there before it runs.
    const last = "0026_operator_last_seen.sql";
    db.run("DELETE FROM schema_migrations WHERE name = ?", [last]);
    db.close();
    for (const command of [["serve", "--port", "0"], ["token", "list"]]) {
      const result = runCli([...SOURCE, ...command, "--data-dir", dataDir]);
      expect({ exitCode: result.exitCode, stderr: result.stderr }).toEqual({ exitCode: 2, stderr: expect.stringMatching(new RegExp(`^crm: migration ${last} failed, and nothing of it was applied \\(the database is as it was\\): [^\\n]+\\n$`)) });
    }
    const locked = tempDir("lock-directory");
    mkdirSync(join(locked, "crm.lock"), { recursive: true });
    const result = runCli([...SOURCE, "serve", "--port", "0", "--data-dir", locked]);
    expect({ exitCode: result.exitCode, stderr: result.stderr }).toEqual({ exitCode: 2, stderr: `crm: cannot open the lock file ${join(locked, "crm.lock")} (--data-dir, CRM_DATA_DIR): unable to open database file\n` });
  });

  test("a second serve on the port of a running one stops with one line, instead of sharing the port and splitting its traffic", async () => {
    const first = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir: tempDir("first"), logLevel: "error" }, createLogger("error", () => {}));
    try {
      const port = first.server.port!;
      const second = Bun.spawn([...SOURCE, "serve", "--port", String(port), "--data-dir", tempDir("second")], { cwd: ROOT, stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "" } });
      // Before the fix the second server ran on: stop it rather than wait for ever.
      const stopper = setTimeout(() => second.kill(), 15_000);
      const exitCode = await second.exited;
      clearTimeout(stopper);
      expect({ exitCode, stderr: await new Response(second.stderr).text() }).toEqual({ exitCode: 2, stderr: `crm: cannot listen on "127.0.0.1" port ${port} (--host, --port): Failed to start server. Is port ${port} in use?\n` });
    } finally {
      await first.stop();
    }
  }, 20_000);

  test("a second serve on the data directory of a running one stops with one line and exit 2; once the first stops, it starts", async () => {
    const dataDir = tempDir("claimed");
    const first = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error" }, createLogger("error", () => {}));
    const refusal = `the data directory ${JSON.stringify(dataDir)} is in use by another crm serve, or a migrate or copy-to-postgres under way (it holds ${join(dataDir, "crm.lock")}); stop that one first, or give this one another --data-dir`;
    try {
      const second = runCli([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir]);
      expect({ exitCode: second.exitCode, stdout: second.stdout, stderr: second.stderr }).toEqual({ exitCode: 2, stdout: "", stderr: `crm: ${refusal}\n` });
      // In the same process too (a test or an embedding program starting two).
      await expect(startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error" }, createLogger("error", () => {}))).rejects.toThrow(refusal);
      expect((await fetch(`${first.url}/readyz`)).status).toBe(200);
    } finally {
      await first.stop();
    }
    const again = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error" }, createLogger("error", () => {}));
    await again.stop();
  });

  test("the claim on the data directory ends with its process, however it ends: a serve killed with SIGKILL leaves none behind", async () => {
    const dataDir = tempDir("killed");
    const killed = await spawnServer([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir, "--log-level", "error"]);
    expect(runCli([...SOURCE, "serve", "--port", "0", "--data-dir", dataDir]).exitCode).toBe(2);
    killed.proc.kill("SIGKILL");
    await killed.proc.exited;
    const next = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error" }, createLogger("error", () => {}));
    await next.stop();
  });

  test("while a serve holds the data directory, a command that would change the schema (an upgrade's migrate) or copy the database is refused; once it is gone the command migrates and says so; with nothing pending, commands run beside it", async () => {
    const dataDir = tempDir("held");
    // A database one migration behind this version, as the old version's serve left it.
    const old = openDatabase(databasePath(dataDir));
    migrate(old.sqlite, MIGRATIONS.slice(0, -1));
    await old.close();
    const unlock = lockDataDirectory(dataDir)!;
    const inUse = `crm: the data directory ${JSON.stringify(dataDir)} is in use by a running crm serve, or a migrate or copy-to-postgres under way (it holds ${join(dataDir, "crm.lock")}): `;
    const pending = `stop it before the schema is changed (pending: ${MIGRATIONS.at(-1)!.name})\n`;
    try {
      for (const command of [["migrate"], ["token", "create", "--name", "n"], ["user", "list"]]) {
        const refused = runCli([...SOURCE, ...command, "--data-dir", dataDir]);
        expect({ command, exitCode: refused.exitCode, stderr: refused.stderr }).toEqual({ command, exitCode: 2, stderr: inUse + pending });
      }
      const copy = runCli([...SOURCE, "copy-to-postgres", "--data-dir", dataDir, "--database-url", "postgres://crm@127.0.0.1:1/crm"]);
      expect({ exitCode: copy.exitCode, stderr: copy.stderr }).toEqual({ exitCode: 2, stderr: `${inUse}stop it first, so that no change lands after the copy\n` });
    } finally {
      unlock();
    }
    // Applied before the command's work, named on stderr as migrate names them on stdout.
    expect(runCli([...SOURCE, "user", "list", "--data-dir", dataDir])).toEqual({ exitCode: 0, stdout: "", stderr: `crm: applied ${MIGRATIONS.at(-1)!.name}\n` });
    // Up to date, nothing is locked: the usual commands work beside a running serve.
    const running = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error" }, createLogger("error", () => {}));
    try {
      expect(runCli([...SOURCE, "migrate", "--data-dir", dataDir])).toEqual({ exitCode: 0, stdout: "database is up to date\n", stderr: "" });
      expect(runCli([...SOURCE, "token", "create", "--name", "beside", "--data-dir", dataDir]).exitCode).toBe(0);
    } finally {
      await running.stop();
    }
  });

  test("while another process has the database open without crm.lock (a serve from before 2026-11-27 took none), a command or serve with migrations to apply is refused and changes nothing; commands that migrate nothing run beside it, and once it is gone the migration runs", async () => {
    const dataDir = tempDir("held-unlocked");
    const file = join(dataDir, "crm.sqlite");
    const old = openDatabase(databasePath(dataDir));
    migrate(old.sqlite, MIGRATIONS.slice(0, -1));
    await old.close();
    // As an old serve holds it: a WAL connection that has read, open until the process ends.
    const holder = Bun.spawn([process.execPath, "-e", `const { Database } = require("bun:sqlite"); const db = new Database(${JSON.stringify(file)}); db.run("PRAGMA journal_mode = WAL"); db.query("SELECT count(*) FROM schema_migrations").get(); console.log("open"); setInterval(() => {}, 1000);`], { stdout: "pipe", stderr: "inherit" });
    try {
      const reader = holder.stdout.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toBe("open\n");
      const refusal = `crm: the database ${file} is open in another process that holds no crm.lock (a crm serve from before 2026-11-27, a crm command under way, or another program such as sqlite3): stop it before the schema is changed (pending: ${MIGRATIONS.at(-1)!.name})\n`;
      // serve too: it holds crm.lock, which an old serve does not look at.
      for (const command of [["migrate"], ["token", "create", "--name", "n"], ["user", "list"], ["serve", "--port", "0"]]) {
        const refused = runCli([...SOURCE, ...command, "--data-dir", dataDir]);
        expect({ command, exitCode: refused.exitCode, stdout: refused.stdout, stderr: refused.stderr }).toEqual({ command, exitCode: 2, stdout: "", stderr: refusal });
      }
      // A backup only reads: it copies beside the old serve as before.
      expect(runCli([...SOURCE, "backup", join(dataDir, "copy.sqlite"), "--data-dir", dataDir]).exitCode).toBe(0);
      const check = new Database(file, { readonly: true });
      expect(check.query("SELECT count(*) AS n FROM schema_migrations").get()).toEqual({ n: MIGRATIONS.length - 1 });
      check.close();
    } finally {
      holder.kill();
      await holder.exited;
    }
    expect(runCli([...SOURCE, "migrate", "--data-dir", dataDir])).toEqual({ exitCode: 0, stdout: `applied ${MIGRATIONS.at(-1)!.name}\n`, stderr: "" });
  });

  test("a command's migration runs on the connection that found the database open nowhere else: a process that opens the file while it runs is refused until it is done (the check and the change were two opens, with an instant between)", async () => {
    const dataDir = tempDir("alone");
    const file = join(dataDir, "crm.sqlite");
    const old = openDatabase(databasePath(dataDir));
    migrate(old.sqlite, MIGRATIONS.filter((m) => m.version < 11));
    // A secret in clear: migration 0011 reads the secrets key to seal it, here from a pipe the test writes when it chooses.
    old.sqlite.query("INSERT INTO webhook_subscriptions (id, target_url, events, secret, created_at, updated_at) VALUES ('sub_1', 'https://192.0.43.10/crm', '[\"contact.created\"]', 'whsec_plain', 1, 1)").run();
    await old.close();
    const keyPipe = join(dataDir, "secrets.key");
    expect(Bun.spawnSync(["mkfifo", "-m", "600", keyPipe]).exitCode).toBe(0);
    const migrating = Bun.spawn([...SOURCE, "migrate", "--data-dir", dataDir], { cwd: ROOT, env: { PATH: process.env.PATH ?? "" }, stdout: "pipe", stderr: "pipe" });
    let writer: number | undefined;
    try {
      // The pipe opens for writing once the migration reads it: from then on it waits inside migration 0011.
      const deadline = Date.now() + 30_000;
      while (writer === undefined) {
        try {
          writer = openSync(keyPipe, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== "ENXIO" || Date.now() > deadline) throw error;
          await Bun.sleep(10);
        }
      }
      // As an old serve starting then opens it: a WAL connection reading the schema, with no wait for locks.
      const opener = Bun.spawnSync([process.execPath, "-e", `const { Database } = require("bun:sqlite"); const db = new Database(${JSON.stringify(file)}); db.run("PRAGMA busy_timeout = 0"); try { db.run("PRAGMA journal_mode = WAL"); console.log(db.query("SELECT count(*) AS n FROM schema_migrations").get().n); } catch (error) { console.log(error.code); }`]);
      expect(opener.stdout.toString()).toBe("SQLITE_BUSY\n");
      writeSync(writer, `${Buffer.alloc(32, 3).toString("base64")}\n`);
      closeSync(writer);
      writer = undefined;
      expect({ exitCode: await migrating.exited, stdout: await new Response(migrating.stdout).text() }).toEqual({ exitCode: 0, stdout: `applied ${MIGRATIONS.filter((m) => m.version >= 11).map((m) => m.name).join(", ")}\n` });
    } finally {
      if (writer !== undefined) closeSync(writer);
      migrating.kill();
      await migrating.exited;
    }
  });

  test("a database a newer crm migrated is refused by serve and every command, in one line, and left as it was", async () => {
    const dataDir = tempDir("newer");
    const db = openDatabase(databasePath(dataDir));
    migrate(db.sqlite, [...MIGRATIONS, { version: 9999, name: "9999_from_the_future.sql", sql: "CREATE TABLE from_the_future (id INTEGER PRIMARY KEY)" }]);
    const before = db.sqlite.query("SELECT version, name FROM schema_migrations ORDER BY version").all();
    await db.close();
    const refusal = `crm: the database was migrated by a newer crm: it has 9999_from_the_future.sql, which crm ${VERSION} (source) does not know. Run the newer crm, or restore the backup taken before the upgrade\n`;
    for (const command of [["serve", "--port", "0"], ["migrate"], ["token", "create", "--name", "n"], ["user", "list"], ["token", "list"]]) {
      const refused = runCli([...SOURCE, ...command, "--data-dir", dataDir]);
      expect({ command, exitCode: refused.exitCode, stdout: refused.stdout, stderr: refused.stderr }).toEqual({ command, exitCode: 2, stdout: "", stderr: refusal });
    }
    await expect(startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, logLevel: "error" }, createLogger("error", () => {}))).rejects.toThrow(ConfigError);
    const after = openDatabase(databasePath(dataDir));
    expect({ migrations: after.sqlite.query("SELECT version, name FROM schema_migrations ORDER BY version").all(), tokens: after.sqlite.query("SELECT count(*) AS n FROM api_tokens").get() }).toEqual({ migrations: before, tokens: { n: 0 } });
    await after.close();
  });
});

describe("configuration: documentation", () => {
  test("--help lists every setting with its flag, environment variable and file key", () => {
    const help = runCli([...SOURCE, "--help"]).stdout;
    for (const setting of SETTINGS) {
      const line = help.split("\n").find((l) => l.trimStart().startsWith(`${setting.flag} `));
      expect(line).toBeDefined();
      expect(line).toContain(setting.env);
      expect(line).toContain(fileKey(setting));
    }
    expect(help).toContain("backup FILE");
  });

  test("the rate settings say which requests their bucket counts, as the limiter does: POST, PATCH and DELETE are writes, every other method a read", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8").split("\n");
    const described = (flag: string) => ({
      help: SETTINGS.find((s) => s.flag === flag)!.help,
      readme: readme.find((line) => line.startsWith(`| \`${flag}\` |`))!.split(" | ").at(-1)!.replace(/ \|$/, ""),
    });
    const reads = "every method but POST, PATCH and DELETE";
    expect([...WRITE_METHODS]).toEqual(["POST", "PATCH", "DELETE"]);
    expect(["--rate-read-per-second", "--rate-read-burst", "--rate-write-per-second", "--rate-write-burst"].map(described)).toEqual([
      { help: `default per-token rate of reads: requests of ${reads} (token create --rate overrides)`, readme: `default reads per second and API token: requests of ${reads}` },
      { help: `default per-token burst of reads (requests of ${reads})`, readme: `default burst of reads (requests of ${reads}) per API token` },
      { help: "default per-token rate of POST, PATCH and DELETE requests", readme: "default POST, PATCH and DELETE requests per second and API token" },
      { help: "default per-token burst of POST, PATCH and DELETE requests", readme: "default burst of POST, PATCH and DELETE requests per API token" },
    ]);
  });

  test("--help and the README's configuration table give every setting the default the code has, and a bounded setting the range it accepts", () => {
    const help = runCli([...SOURCE, "--help"]).stdout.split("\n");
    const readme = readFileSync(join(ROOT, "README.md"), "utf8").split("\n");
    const stated = SETTINGS.map((s) => {
      const line = help.find((l) => l.trimStart().startsWith(`${s.flag} `))!;
      const cells = readme.find((l) => l.startsWith(`| \`${s.flag}\` |`))!.split(" | ");
      const lowest = s.kind === "positive-int" ? 1 : 0;
      return {
        flag: s.flag,
        // README writes a default in code type, a word of explanation after it in brackets; off for a flag that is false.
        defaults: [/\(default: (.*)\)$/.exec(line)?.[1]?.startsWith(cells[3]!.replace(/`/g, "").replace(/ \(.*\)$/, "").replace(/^off$/, "false")), cells[3]],
        range: s.max === undefined ? null : [line.includes(`${lowest}-${s.max}`), cells[4]!.includes(`${lowest} to ${s.max}`)],
      };
    });
    expect(stated.filter((s) => s.defaults[0] !== true || (s.range !== null && s.range.includes(false)))).toEqual([]);
  });

  test("the README's configuration table has a row for every setting", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const missing = SETTINGS.filter((s) => !readme.includes(`| \`${s.flag}\` | \`${s.env}\` | \`${fileKey(s)}\` |`)).map((s) => s.flag);
    expect(missing).toEqual([]);
  });
});
