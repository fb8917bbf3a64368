import type { Server } from "bun";
import { lookup } from "node:dns/promises";
import { realpathSync } from "node:fs";
import { isIP } from "node:net";
import { relative, resolve } from "node:path";
import { createApp, createRuntime, logCreatedSecretsKey } from "./app.ts";
import { ConfigError, type Config } from "./config.ts";
import { migrateAlone, openBackend, refuseNewerDatabase } from "./db/backend.ts";
import { dataDirectoryLockFile, databasePath, lockDataDirectory, openDatabase } from "./db/database.ts";
import { loadSecretsKey, SecretBox } from "./webhooks/secrets.ts";
import type { Runtime } from "./runtime.ts";
import { isEmbeddedPath } from "./shared/compiled.ts";
import { createLogger, type Logger } from "./shared/log.ts";
import { listTokens } from "./auth/service.ts";
import { startRetentionJob } from "./webhooks/retention.ts";
import { addressAsHost } from "./webhooks/targets.ts";
import { startNameIndexing } from "./contacts/service.ts";
import { settlesWithin } from "./shared/time.ts";
import { hasOperators, issueSetupCode } from "./operators/service.ts";
import { connectionCapWithin, DESCRIPTOR_RESERVE, openFileLimit } from "./limits/open-files.ts";

export interface RunningServer {
  url: string;
  runtime: Runtime;
  server: Server<unknown>;
  /** the one-time console setup link, printed at start while no operator exists; null otherwise */
  setupUrl: string | null;
  /**
   * stop stops accepting requests, lets in-flight requests finish until the shutdown deadline
   * (then cuts them off), commits queued writes and closes the database. With `drain` it first
   * drains the connections (shutdownDrainMs at most), still listening: each answer closes its
   * connection and /readyz fails, so clients leave between two requests.
   */
  stop(options?: { drain?: boolean }): Promise<void>;
}

/** MANUAL_ATTEMPTS_ANSWER_MS is how long before the shutdown deadline manual attempts are given up, for their requests to be answered. */
const MANUAL_ATTEMPTS_ANSWER_MS = 1000;

/** shellWord quotes a word for a POSIX shell when it needs quoting. */
export function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * invokedAs is the compiled binary as the operator ran it, when `argv0` (as given) leads to
 * `executable`: a path (a symlink's, /usr/local/bin/crm -> /opt/crm/crm-VERSION), made absolute,
 * or a name found on PATH, as it is. A line naming the link runs whatever binary it points to after
 * the next upgrade; one naming its target, the old binary, refused by the migrated database. Else `executable`.
 */
function invokedAs(argv0: string, executable: string, cwd: string): string {
  const given = argv0.includes("/") ? resolve(cwd, argv0) : Bun.which(argv0);
  try {
    if (given && realpathSync(given) === realpathSync(executable)) return argv0.includes("/") ? given : argv0;
  } catch {
    // A path that no longer leads anywhere (the link moved meanwhile): the binary's own path still does.
  }
  return executable;
}

/**
 * commandHere is a command line (`words`) as typed on this machine to work on this server's
 * database: the compiled binary as it was run (invokedAs), from source `npx bun server/main.ts`,
 * and the server's data directory (null: none, the server's database being PostgreSQL's), so what
 * it creates lands where the server looks for it.
 */
export function commandHere(words: string[], dataDir: string | null, entry = Bun.main, executable = process.execPath, cwd = process.cwd(), argv0 = process.argv0): string {
  const compiled = isEmbeddedPath(entry);
  const fromCwd = relative(cwd, entry);
  const program = compiled ? [invokedAs(argv0, executable, cwd)] : entry.endsWith("server/main.ts") ? ["npx", "bun", fromCwd.startsWith("..") ? entry : fromCwd] : ["crm"];
  return [...program, ...words, ...(dataDir === null ? [] : ["--data-dir", resolve(cwd, dataDir)])].map(shellWord).join(" ");
}

/**
 * firstStartCommand is commandHere for the server's configured database. On PostgreSQL it never
 * repeats the URL, which may hold a password: it adds where the server read it (its --config file,
 * its --database-url-file), or says to add the URL as the server was given it.
 */
function firstStartCommand(config: Config, words: string[]): string {
  if (!config.databaseUrl) return commandHere(words, config.dataDir);
  const { reach } = config.databaseUrlFrom;
  return reach ? commandHere([...words, ...reach], null) : `${commandHere(words, null)} and this server's --database-url (or CRM_DATABASE_URL)`;
}

/** unbracketed is --host without the brackets an IPv6 address may be given in ("[::1]"). */
function unbracketed(host: string): string {
  return host.replace(/^\[(.*)\]$/, "$1");
}

/** resolves is whether `host` names an address to listen on: an IP address (an IPv6 one in brackets too), empty (every address), or a name the resolver finds. */
async function resolves(host: string): Promise<boolean> {
  if (host === "" || isIP(unbracketed(host)) !== 0) return true;
  return lookup(host).then(() => true, () => false);
}

/** openAndListen opens and migrates the configured database and listens with the app on it; the database is closed again if a step fails. */
async function openAndListen(config: Config, log: Logger) {
  const db = await openBackend(config);
  try {
    const runtime = await createRuntime({ db, config, log });
    const app = createApp(runtime);
    // Bun.serve has no connection cap, header timeout setting or body deadline: limitsGuard and
    // parseJsonBody supply the cap (503) and the body deadline (408); the header deadline is Bun's fixed 10 s.
    // Bun's own body cap is off (Infinity): past it Bun answers a bare 413 itself, before the app
    // could answer the documented one. Every body is read within 1 MiB (readLimitedBody), and of a
    // body nobody reads Bun holds about 1 MiB whatever its length (measured), so none is unbounded.
    // Elysia asks for SO_REUSEPORT, which lets a second `serve` bind the same port and take half its
    // connections (on SQLite, with a database and an in-memory state of its own): a busy port stops start-up.
    try {
      app.listen({ hostname: config.host, port: config.port, maxRequestBodySize: Infinity, idleTimeout: config.idleTimeoutSeconds, reusePort: false });
    } catch (error) {
      // A busy port, or a host that is no address of this machine or does not resolve: one line naming them.
      // Bun's error for a name that does not resolve has whatever errno its listen left ("ENOENT: no
      // such file or directory" among them): the name is looked up again to say so.
      if (!(await resolves(config.host))) throw new ConfigError(`cannot listen on ${JSON.stringify(config.host)} (--host): the name does not resolve to an address`);
      throw new ConfigError(`cannot listen on ${JSON.stringify(config.host)} port ${config.port} (--host, --port): ${(error as Error).message}`);
    }
    return { db, runtime, app };
  } catch (error) {
    await db.close();
    throw error;
  }
}

/**
 * migrateDataDirectory applies the migrations pending in the data directory's database before serve
 * opens it, on a connection that has the file to itself (migrateAlone): crm.lock keeps other crm
 * processes of this version out, not a serve from before 2026-11-27 (it takes none) nor sqlite3.
 * With nothing pending it changes nothing and refuses nothing.
 */
async function migrateDataDirectory(config: Config, log: Logger): Promise<void> {
  const file = databasePath(config.dataDir);
  const db = openDatabase(file, config.synchronous);
  const { pending } = await refuseNewerDatabase(db).finally(() => db.close());
  if (pending.length === 0) return;
  const secrets = () => {
    const secretsKey = loadSecretsKey(config);
    if (secretsKey.created) logCreatedSecretsKey(log, secretsKey.path);
    return new SecretBox(secretsKey.key);
  };
  await migrateAlone(file, config.synchronous, pending, secrets, (message, fields) => log.warn(message, fields));
}

/**
 * withinOpenFileLimit is `config` with its connection cap lowered to what the open-file limit holds
 * (connectionCapWithin), saying so in one warning; `config` itself when it fits.
 */
function withinOpenFileLimit(config: Config, log: Logger, limit = openFileLimit()): Config {
  const cap = connectionCapWithin(config.maxConnections, limit);
  if (cap === null) return config;
  log.warn(
    `the open-file limit (${limit}) cannot hold --max-connections ${config.maxConnections} beside the service's own descriptors (${DESCRIPTOR_RESERVE}): at most ${cap} connections are served at once, the next get 503; raise the limit to ${config.maxConnections + DESCRIPTOR_RESERVE} or more (LimitNOFILE= in the unit, ulimit -n before serve)`,
    { open_file_limit: limit, max_connections: config.maxConnections, connections_served: cap },
  );
  return { ...config, maxConnections: cap };
}

/**
 * startHttpClient makes Bun start its fetch thread now: started on the first fetch, it needs a free
 * descriptor for its event loop, and when there is none Bun exits ("ran out of file descriptors")
 * instead of failing the fetch. A Unix socket that does not exist fails at once, sending nothing
 * anywhere: an address, even 127.0.0.1:0, would go to HTTP_PROXY when that is set, and a proxy
 * that does not answer held the start for good.
 */
async function startHttpClient(): Promise<void> {
  await fetch("http://localhost/", { unix: "/nonexistent/crm-starts-its-http-client" }).catch(() => {});
}

/** startServer opens the configured database (PostgreSQL or the data directory's SQLite), migrates, and listens; it is what `serve` runs. */
export async function startServer(givenConfig: Config, log: Logger = createLogger(givenConfig.logLevel)): Promise<RunningServer> {
  const config = withinOpenFileLimit(givenConfig, log);
  await startHttpClient();
  // Instances share a PostgreSQL database by design; a SQLite data directory serves one: a second
  // serve would run its own group-commit writer, rate limits and per-subscription caps on the file.
  if (!config.databaseUrl) databasePath(config.dataDir); // checks the directory, creating it, before the lock goes in
  const unlock = config.databaseUrl ? () => {} : lockDataDirectory(config.dataDir);
  if (!unlock) {
    throw new ConfigError(
      `the data directory ${JSON.stringify(config.dataDir)} is in use by another crm serve, or a migrate or copy-to-postgres under way (it holds ${dataDirectoryLockFile(config.dataDir)}); stop that one first, or give this one another --data-dir`,
    );
  }
  const { db, runtime, app } = await (config.databaseUrl ? Promise.resolve() : migrateDataDirectory(config, log)).then(() => openAndListen(config, log)).catch((error: unknown) => {
    unlock();
    throw error;
  });
  const server = app.server!;
  const url = `http://${addressAsHost(unbracketed(config.host))}:${server.port}`;
  if ((await listTokens(db)).length === 0) {
    const command = firstStartCommand(config, ["token", "create", "--name", "my-integration"]);
    log.info(`no API token exists yet; create the first one with: ${command}`, config.databaseUrl ? {} : { data_dir: resolve(config.dataDir) });
  }
  let setupUrl: string | null = null;
  if (!(await hasOperators(db))) {
    setupUrl = `${url}/console/setup?code=${await issueSetupCode(db)}`;
    const command = firstStartCommand(config, ["operator", "create", "--email", "E", "--password-stdin"]);
    log.info(`no console operator exists yet; open this one-time link within 30 minutes to create the first one (or run: ${command})`, { setup_url: setupUrl });
  }
  if (db.dialect === "sqlite") db.watchFile(log);
  runtime.deliveries.start();
  const stopRetention = startRetentionJob(runtime);
  const stopNameIndexing = startNameIndexing(runtime);
  // Every background job that writes stops once a newer crm has migrated the database under this instance.
  runtime.migrations.start(async () => {
    await Promise.all([runtime.deliveries.stop(), stopRetention(), stopNameIndexing()]);
  });
  let stopping: Promise<void> | undefined;
  return {
    url,
    runtime,
    server,
    setupUrl,
    stop({ drain = false } = {}) {
      stopping ??= (async () => {
        const started = performance.now();
        const remaining = () => Math.max(0, config.shutdownTimeoutMs - (performance.now() - started));
        // Bun's stop closes idle keep-alive connections at once and resets a request that arrives
        // on one just then: the drain keeps serving until the clients have left, or its window ends.
        const open = drain ? await runtime.connections.drain(server.port!, Math.min(config.shutdownDrainMs, remaining())) : 0;
        if (open > 0) log.info("drain window over with connections open; idle ones are closed now, busy ones after their answer", { connections: open, drain_ms: config.shutdownDrainMs });
        const requestsFinished = app.stop(false);
        // A manual retry's request waits for its attempt, which may take longer than the deadline:
        // given up a moment before it, the request is answered 503 shutting-down, not cut off.
        if (!(await settlesWithin(requestsFinished, remaining() - MANUAL_ATTEMPTS_ANSWER_MS))) {
          await runtime.deliveries.abandonManualAttempts();
          if (!(await settlesWithin(requestsFinished, remaining()))) {
            log.warn("shutdown deadline reached; closing the connections of unfinished requests", { deadline_ms: config.shutdownTimeoutMs });
            await server.stop(true);
          }
        }
        // Elysia runs afterResponse hooks (the request's log line and metrics) in a setImmediate.
        await new Promise((resolve) => setImmediate(resolve));
        // Requests are done, so no new deliveries appear; attempts in flight get what time is left.
        // The watch goes first: a stop of the background work it began ends before this one starts.
        await runtime.migrations.stop();
        await Promise.all([runtime.deliveries.stop(remaining()), stopRetention(), stopNameIndexing()]);
        await db.close();
        unlock();
        log.info("stopped", { duration_ms: Math.round(performance.now() - started) });
      })();
      return stopping;
    },
  };
}
