import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { dirname, resolve } from "node:path";
import { fileErrorText, isAbsent, notOwnedText, openToOthers, statIfThere } from "./shared/files.ts";
import { DAY_MS } from "./shared/time.ts";
import { networkError, type PrivateTargets } from "./webhooks/targets.ts";

type Kind = "string" | "port" | "positive-int" | "number" | "whole" | "boolean" | "choice" | "seconds-list" | "secret" | "address-list" | "database-url" | "private-targets";

interface Setting {
  key: keyof Config;
  flag: string;
  env: string;
  kind: Kind;
  help: string;
  /** largest value a positive-int, whole or number setting accepts, or each entry of a seconds-list */
  max?: number;
  /** the values a choice setting accepts */
  choices?: readonly string[];
  /** a path: in crm.toml a relative one is the file's directory's */
  path?: true;
  /** what the service does when the setting is not given (its default is empty), as --help states the default */
  unset?: string;
}

export type LogLevel = "debug" | "info" | "warn" | "error";

/** DatabaseUrlFrom is where the database URL was given: what to change when it is wrong, and how a command reaches the same database. */
export interface DatabaseUrlFrom {
  /** named is how a message names it: "--database-url, CRM_DATABASE_URL", "database_url in FILE", "the file F that database_url_file in FILE names" */
  named: string;
  /** reach is what a command line adds to reach the same database without the password in it (--config FILE, --database-url-file F); null: only the URL itself would */
  reach: string[] | null;
}

/** URL_BY_FLAG_OR_ENV is where a database URL given on the command line or in the environment comes from: the one setting's two spellings. */
const URL_BY_FLAG_OR_ENV: DatabaseUrlFrom = { named: "--database-url, CRM_DATABASE_URL", reach: null };

/** Synchronous is SQLite's durability level: "full" syncs every commit to disk, "normal" only at checkpoints. */
export type Synchronous = "full" | "normal";

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  /** postgres:// URL of a PostgreSQL database shared by every instance; "" keeps SQLite in dataDir */
  databaseUrl: string;
  /** file holding databaseUrl on one line, so that crm.toml can name the database without its password; "" none */
  databaseUrlFile: string;
  /** where databaseUrl was given (no setting of its own), for the messages that send the operator to it */
  databaseUrlFrom: DatabaseUrlFrom;
  /** the --config file and the secrets it holds (database_url, metrics_token), used or overridden; null when it holds none (no setting of its own) */
  configFileSecrets: { path: string; keys: string[] } | null;
  /** PostgreSQL schema that holds the service's tables, whatever the role's search_path; "" is public, as long as no other schema holds them too */
  databaseSchema: string;
  /** connections each instance opens to PostgreSQL at most */
  databasePool: number;
  /** seconds PostgreSQL may answer nothing at all before the statements waiting for it are given up (503) */
  databaseAnswerTimeoutSeconds: number;
  /** seconds a pooled PostgreSQL connection may stay idle before it is closed */
  databaseIdleTimeoutSeconds: number;
  /** file holding the key that seals webhook signing secrets; "" means secrets.key in the data directory */
  secretsKeyFile: string;
  synchronous: Synchronous;
  logLevel: LogLevel;
  /** non-public addresses webhook targets may use: all (true), none (false), or those in the listed networks */
  allowPrivateTargets: PrivateTargets;
  retrySchedule: number[];
  deliveryTimeoutMs: number;
  deliveryRetentionDays: number;
  /** bytes of a receiver's answer kept with each attempt (at most 4096) */
  deliveryResponseBodyBytes: number;
  /** size budget of the delivery history in MiB; past it the oldest finished deliveries are pruned; 0: no budget */
  deliveryHistoryMaxMb: number;
  /** days the ids of deleted contacts and accounts stay listed for pollers */
  tombstoneRetentionDays: number;
  /** hours a subscription's attempts may all fail before it is disabled; fractions allowed (tests use seconds); 0: never */
  disableFailingAfterHours: number;
  /** bearer token for GET /metrics; "" answers loopback clients only */
  metricsToken: string;
  shutdownTimeoutMs: number;
  /** milliseconds a stop keeps answering (each answer closing its connection) while client connections are open; within shutdownTimeoutMs */
  shutdownDrainMs: number;
  /** addresses of reverse proxies whose X-Forwarded-For names the client */
  trustedProxies: string[];
  /** seconds a keep-alive connection may sit idle (Bun.serve idleTimeout, 1 to 255) */
  idleTimeoutSeconds: number;
  /** milliseconds a client has to send a whole request body before a 408 */
  bodyTimeoutMs: number;
  /** connections served at once; a request on a further connection gets 503 */
  maxConnections: number;
  /** connections one client address may hold; 0: one eighth of maxConnections */
  maxConnectionsPerClient: number;
  /** MiB of request bodies buffered at once, all requests together; past it 503 */
  bodyBufferMaxMb: number;
  /** MiB of answers held until their clients read them, all clients together (an eighth per client); past it 503 (429 past a client's share) */
  answerBufferMaxMb: number;
  /** slow lists held at once on the read lane (SQLite's thread, half of PostgreSQL's pool), the running ones included; 0: no lane */
  slowListLane: number;
  rateReadPerSecond: number;
  rateReadBurst: number;
  rateWritePerSecond: number;
  rateWriteBurst: number;
  /** failed authentications a client address may make per minute before 429 */
  authFailuresPerMinute: number;
}

/** MAX_DATABASE_POOL bounds --database-pool: PostgreSQL allows 100 connections by default, all instances together. */
const MAX_DATABASE_POOL = 100;

/** MAX_DATABASE_ANSWER_TIMEOUT_SECONDS bounds --database-answer-timeout-seconds: a longer wait answers no client in time. */
const MAX_DATABASE_ANSWER_TIMEOUT_SECONDS = 3600;

/** MAX_DATABASE_IDLE_TIMEOUT_SECONDS bounds --database-idle-timeout-seconds: firewalls forget idle flows well before an hour. */
const MAX_DATABASE_IDLE_TIMEOUT_SECONDS = 3600;

/**
 * MAX_TIMER_SETTING_MS bounds the millisecond settings a timer waits on (a day): a timer asked to
 * wait longer than 2^31-1 ms (about 24.8 days) fires at once instead, cutting every such wait to 1 ms.
 */
const MAX_TIMER_SETTING_MS = DAY_MS;

/**
 * MAX_RETRY_DELAY_SECONDS bounds each --retry-schedule entry (30 days, the default delivery
 * retention): an event retried later is long stale, and a far larger delay put the next attempt
 * past any instant the API can write (500) or PostgreSQL's bigint can hold.
 */
const MAX_RETRY_DELAY_SECONDS = 30 * 86_400;

/**
 * MAX_DISABLE_FAILING_AFTER_HOURS bounds --disable-failing-after-hours (ten years; 0 turns the
 * disable off): the console writes when a failing subscription is disabled, and a far larger
 * setting put that instant past any date it can write.
 */
const MAX_DISABLE_FAILING_AFTER_HOURS = 87_600;

/**
 * MAX_RETENTION_DAYS bounds --delivery-retention-days and --tombstone-retention-days (ten years):
 * no retention asked of a CRM is longer, and a far larger setting put the pruning's cutoff, that
 * long before now, before any instant a timestamp writes or PostgreSQL's bigint holds.
 */
const MAX_RETENTION_DAYS = 3650;

/** DEFAULT_RETRY_SCHEDULE is DESIGN.md's schedule of delays after the first attempt, in seconds. */
const DEFAULT_RETRY_SCHEDULE = [5, 300, 1800, 7200, 18000, 36000, 36000];

/** DEFAULT_CONFIG holds the value of every setting when nothing overrides it. */
export const DEFAULT_CONFIG: Config = {
  host: "127.0.0.1",
  port: 3000,
  dataDir: "./data",
  databaseUrl: "",
  databaseUrlFile: "",
  databaseUrlFrom: URL_BY_FLAG_OR_ENV,
  configFileSecrets: null,
  databaseSchema: "",
  databasePool: 10,
  databaseAnswerTimeoutSeconds: 5,
  databaseIdleTimeoutSeconds: 60,
  secretsKeyFile: "",
  synchronous: "full",
  logLevel: "info",
  allowPrivateTargets: false,
  retrySchedule: DEFAULT_RETRY_SCHEDULE,
  deliveryTimeoutMs: 15000,
  deliveryRetentionDays: 30,
  deliveryResponseBodyBytes: 1024,
  deliveryHistoryMaxMb: 0,
  tombstoneRetentionDays: 90,
  disableFailingAfterHours: 120,
  metricsToken: "",
  shutdownTimeoutMs: 10000,
  shutdownDrainMs: 2000,
  trustedProxies: [],
  idleTimeoutSeconds: 10,
  bodyTimeoutMs: 10000,
  maxConnections: 1024,
  maxConnectionsPerClient: 0,
  bodyBufferMaxMb: 64,
  answerBufferMaxMb: 128,
  slowListLane: 32,
  rateReadPerSecond: 100,
  rateReadBurst: 200,
  rateWritePerSecond: 50,
  rateWriteBurst: 100,
  authFailuresPerMinute: 20,
};

/** SETTINGS describes every configuration switch: its flag, environment variable and meaning. */
export const SETTINGS: Setting[] = [
  { key: "host", flag: "--host", env: "CRM_HOST", kind: "string", help: "address to listen on" },
  { key: "port", flag: "--port", env: "PORT", kind: "port", help: "TCP port to listen on (0 picks a free one)" },
  { key: "dataDir", flag: "--data-dir", env: "CRM_DATA_DIR", kind: "string", path: true, help: "directory holding the SQLite database (in crm.toml, a relative path is the file's directory's)" },
  {
    key: "databaseUrl",
    flag: "--database-url",
    env: "CRM_DATABASE_URL",
    kind: "database-url",
    help: "postgres://user:password@host:port/database of a PostgreSQL database (13+) that serve and every command use, shared by several instances (needs --secrets-key-file)",
    unset: "SQLite in --data-dir",
  },
  {
    key: "databaseUrlFile",
    flag: "--database-url-file",
    env: "CRM_DATABASE_URL_FILE",
    kind: "string",
    path: true,
    help: "file holding the --database-url on one line (0600, owned by the service's user), so that crm.toml, which serve and every command read, names the database without holding its password; not together with --database-url",
  },
  {
    key: "databaseSchema",
    flag: "--database-schema",
    env: "CRM_DATABASE_SCHEMA",
    kind: "string",
    help: "PostgreSQL schema that holds the service's tables, whatever the role's search_path (an existing schema; the first start creates the tables there)",
    unset: "public; a database whose service tables are in more than one schema is refused until this names one of them",
  },
  { key: "databasePool", flag: "--database-pool", env: "CRM_DATABASE_POOL", kind: "positive-int", max: MAX_DATABASE_POOL, help: `connections to PostgreSQL each instance opens at most (1-${MAX_DATABASE_POOL})` },
  {
    key: "databaseAnswerTimeoutSeconds",
    flag: "--database-answer-timeout-seconds",
    env: "CRM_DATABASE_ANSWER_TIMEOUT_SECONDS",
    kind: "positive-int",
    max: MAX_DATABASE_ANSWER_TIMEOUT_SECONDS,
    help: `seconds PostgreSQL may answer nothing at all (a network partition) before the statements waiting for it are given up (their requests 503) and every pooled connection closed (1-${MAX_DATABASE_ANSWER_TIMEOUT_SECONDS}); a statement the server is still running, or one waiting for the instances' write lock, is not given up while the server answers a check on a connection of its own; it is also how long a read or a write waits for a lock another session holds (lock_timeout) before its request is answered 503 database-busy`,
  },
  {
    key: "databaseIdleTimeoutSeconds",
    flag: "--database-idle-timeout-seconds",
    env: "CRM_DATABASE_IDLE_TIMEOUT_SECONDS",
    kind: "positive-int",
    max: MAX_DATABASE_IDLE_TIMEOUT_SECONDS,
    help: `seconds a pooled connection to PostgreSQL may stay idle before it is closed (1-${MAX_DATABASE_IDLE_TIMEOUT_SECONDS}); keep it below the shortest idle timeout of the firewalls and NAT gateways between the instances and the database, which forget an idle connection without telling either end; also how often the listening connection is checked`,
  },
  {
    key: "secretsKeyFile",
    flag: "--secrets-key-file",
    env: "CRM_SECRETS_KEY_FILE",
    kind: "string",
    path: true,
    help: "file with the key (base64, 32 bytes) that encrypts webhook signing secrets in the database. Keep it: backups do not contain it",
    unset: "secrets.key in the data directory, created 0600 on first start",
  },
  {
    key: "synchronous",
    flag: "--synchronous",
    env: "CRM_SYNCHRONOUS",
    kind: "choice",
    choices: ["full", "normal"],
    help: "full: every commit is on disk before its request is answered (survives power loss); normal: the last commits may be lost on power loss (not on a crash of the service)",
  },
  { key: "logLevel", flag: "--log-level", env: "CRM_LOG_LEVEL", kind: "choice", choices: ["debug", "info", "warn", "error"], help: "debug, info, warn or error (at debug a command's unexpected error prints its stack too)" },
  {
    key: "allowPrivateTargets",
    flag: "--allow-private-targets",
    env: "CRM_ALLOW_PRIVATE_TARGETS",
    kind: "private-targets",
    help: "webhook targets on non-public addresses: a comma-separated list of networks (--allow-private-targets=10.0.0.0/8,fd12::/16) allows those alone; 1 (the flag alone) allows every one, this host's loopback and cloud metadata (169.254.169.254) included, for tests and development",
  },
  { key: "retrySchedule", flag: "--retry-schedule", env: "CRM_RETRY_SCHEDULE", kind: "seconds-list", max: MAX_RETRY_DELAY_SECONDS, help: `webhook retry delays in seconds, comma-separated (each 0-${MAX_RETRY_DELAY_SECONDS}, 30 days)` },
  { key: "deliveryTimeoutMs", flag: "--delivery-timeout-ms", env: "CRM_DELIVERY_TIMEOUT_MS", kind: "positive-int", max: MAX_TIMER_SETTING_MS, help: `webhook request timeout in milliseconds (1-${MAX_TIMER_SETTING_MS}, a day)` },
  { key: "deliveryRetentionDays", flag: "--delivery-retention-days", env: "CRM_DELIVERY_RETENTION_DAYS", kind: "positive-int", max: MAX_RETENTION_DAYS, help: `days webhook deliveries, attempts and events are kept, and a deleted contact's email on its tombstone (1-${MAX_RETENTION_DAYS}, ten years)` },
  { key: "deliveryResponseBodyBytes", flag: "--delivery-response-body-bytes", env: "CRM_DELIVERY_RESPONSE_BODY_BYTES", kind: "positive-int", max: 4096, help: "bytes of a receiver's answer kept with each attempt (1-4096)" },
  { key: "deliveryHistoryMaxMb", flag: "--delivery-history-max-mb", env: "CRM_DELIVERY_HISTORY_MAX_MB", kind: "whole", help: "size budget of the webhook delivery history in MiB; past it the oldest finished deliveries are pruned (0: no budget, only the retention days)" },
  {
    key: "tombstoneRetentionDays",
    flag: "--tombstone-retention-days",
    env: "CRM_TOMBSTONE_RETENTION_DAYS",
    kind: "positive-int",
    max: MAX_RETENTION_DAYS,
    help: `days deleted contacts, accounts and users stay listed in GET .../deleted (1-${MAX_RETENTION_DAYS}, ten years; a poller down longer resyncs in full)`,
  },
  {
    key: "disableFailingAfterHours",
    flag: "--disable-failing-after-hours",
    env: "CRM_DISABLE_FAILING_AFTER_HOURS",
    kind: "number",
    max: MAX_DISABLE_FAILING_AFTER_HOURS,
    help: `a webhook subscription whose attempts have all failed for this many hours is disabled (0-${MAX_DISABLE_FAILING_AFTER_HOURS}, ten years; 0: never; fractions allowed: 0.001 is 3.6 s, for tests)`,
  },
  { key: "metricsToken", flag: "--metrics-token", env: "CRM_METRICS_TOKEN", kind: "secret", help: "bearer token GET /metrics requires (16 to 200 printable ASCII characters without spaces); without one, /metrics answers loopback clients only" },
  { key: "shutdownTimeoutMs", flag: "--shutdown-timeout-ms", env: "CRM_SHUTDOWN_TIMEOUT_MS", kind: "positive-int", max: MAX_TIMER_SETTING_MS, help: `on SIGTERM/SIGINT, how long in-flight requests and webhook deliveries may take to finish, counted from the signal (the drain included; 1-${MAX_TIMER_SETTING_MS}, a day)` },
  {
    key: "shutdownDrainMs",
    flag: "--shutdown-drain-ms",
    env: "CRM_SHUTDOWN_DRAIN_MS",
    kind: "whole",
    max: MAX_TIMER_SETTING_MS,
    help: `on SIGTERM/SIGINT, how long the service keeps listening while client connections are open, answering each request with Connection: close and /readyz with 503, before it stops listening (ends early once none is open; part of --shutdown-timeout-ms; 0: stop listening at once; 0-${MAX_TIMER_SETTING_MS}, a day)`,
  },
  { key: "trustedProxies", flag: "--trusted-proxies", env: "CRM_TRUSTED_PROXIES", kind: "address-list", help: "comma-separated IP addresses of reverse proxies whose X-Forwarded-For is believed" },
  { key: "idleTimeoutSeconds", flag: "--idle-timeout-seconds", env: "CRM_IDLE_TIMEOUT_SECONDS", kind: "positive-int", max: 255, help: "seconds an idle keep-alive connection stays open (1-255; Bun checks every 4 s, so it closes up to 4 s later)" },
  { key: "bodyTimeoutMs", flag: "--body-timeout-ms", env: "CRM_BODY_TIMEOUT_MS", kind: "positive-int", max: MAX_TIMER_SETTING_MS, help: `time a client has to send the whole request body, in milliseconds (1-${MAX_TIMER_SETTING_MS}, a day); then 408` },
  { key: "maxConnections", flag: "--max-connections", env: "CRM_MAX_CONNECTIONS", kind: "positive-int", help: "client connections served at once; a request on one more gets 503" },
  { key: "maxConnectionsPerClient", flag: "--max-connections-per-client", env: "CRM_MAX_CONNECTIONS_PER_CLIENT", kind: "whole", help: "connections one client address (IPv6: its /64) may hold; a request on one more gets 503; behind --trusted-proxies, requests in flight per forwarded client address (0: one eighth of --max-connections)" },
  { key: "bodyBufferMaxMb", flag: "--body-buffer-max-mb", env: "CRM_BODY_BUFFER_MAX_MB", kind: "positive-int", help: "MiB of request bodies held in memory at once, all requests together; a body beyond gets 503" },
  {
    key: "answerBufferMaxMb",
    flag: "--answer-buffer-max-mb",
    env: "CRM_ANSWER_BUFFER_MAX_MB",
    kind: "positive-int",
    help: "MiB of answers held in memory until their clients read them, all clients together (answers of 64 Ki characters or more, sent in 64 KiB pieces); a GET's answer beyond gets 503, and one past its client's share (an eighth) 429 (a write's answer is counted and sent)",
  },
  {
    key: "slowListLane",
    flag: "--slow-list-lane",
    env: "CRM_SLOW_LIST_LANE",
    kind: "whole",
    help: "contact lists whose count reads many rows (several relation filters, time filters, a name search) run in turns per client, on SQLite one at a time on a thread of their own, on PostgreSQL on half the pool; this many held at once (the running ones included); one more gets 503 (0: they run as any read, on SQLite's main thread, holding up every other request meanwhile); the delivery history's measure and the console's failures by reason take their turns there too",
  },
  { key: "rateReadPerSecond", flag: "--rate-read-per-second", env: "CRM_RATE_READ_PER_SECOND", kind: "positive-int", help: "default per-token rate of reads: requests of every method but POST, PATCH and DELETE (token create --rate overrides)" },
  { key: "rateReadBurst", flag: "--rate-read-burst", env: "CRM_RATE_READ_BURST", kind: "positive-int", help: "default per-token burst of reads (requests of every method but POST, PATCH and DELETE)" },
  { key: "rateWritePerSecond", flag: "--rate-write-per-second", env: "CRM_RATE_WRITE_PER_SECOND", kind: "positive-int", help: "default per-token rate of POST, PATCH and DELETE requests" },
  { key: "rateWriteBurst", flag: "--rate-write-burst", env: "CRM_RATE_WRITE_BURST", kind: "positive-int", help: "default per-token burst of POST, PATCH and DELETE requests" },
  { key: "authFailuresPerMinute", flag: "--auth-failures-per-minute", env: "CRM_AUTH_FAILURES_PER_MINUTE", kind: "positive-int", help: "failed API authentications per client address (IPv6: its /64) and minute before 429" },
];

/**
 * userCutShort tells whether a parsed URL's user and password end before their @: one of them held
 * a /, ? or # not percent-encoded, which ends the host, so postgres://crm:2024/Summer@db/crm parses
 * as host crm, port 2024 and the path /Summer@db/crm, the password nowhere URL would hide it.
 */
function userCutShort(parsed: URL): boolean {
  return parsed.username === "" && `${parsed.pathname}${parsed.search}${parsed.hash}`.includes("@");
}
/** settingOf is the entry of SETTINGS for a Config key. */
const settingOf = (key: keyof Config) => SETTINGS.find((s) => s.key === key)!;

/** redactedUrl is a database URL with its password replaced by ***, fit for messages and logs. */
export function redactedUrl(url: string): string {
  const parsed = URL.canParse(url) ? new URL(url) : null;
  // Anything else may hold the password anywhere before the last @ (URL takes a postgres: URL missing
  // a slash, postgres:/crm:pw@db/crm, for one without a host, the password in its path): all of that
  // part is hidden, and the password parameters.
  if (!parsed || !/^postgres(ql)?:$/.test(parsed.protocol) || parsed.host === "" || userCutShort(parsed)) {
    return url.replace(/^(postgres(?:ql)?:[\\/]*|[a-z][a-z0-9+.-]*:\/\/)?.*@/is, "$1***@").replace(/([?&](?:ssl)?password=)[^&#]*/gi, "$1***");
  }
  if (parsed.password) parsed.password = "***";
  parsed.search = queryPasswords(parsed.search, "redacted");
  return parsed.toString();
}

/** urlWithoutPassword is a postgres:// URL (one the settings took) without its password and password parameters, for a command line that leaves them to ~/.pgpass. */
export function urlWithoutPassword(url: string): string {
  const parsed = new URL(url);
  parsed.password = "";
  parsed.search = queryPasswords(parsed.search, "left out");
  return parsed.toString();
}

/**
 * queryPasswords is a URL's query (`search`, its ? included) as written but for the parameters in
 * which libpq takes a password (password, and sslpassword, the client key's passphrase), each
 * redacted to *** or left out; their names are read decoded, as libpq reads them (pass%77ord too).
 * Not through searchParams, which writes the whole query anew, a %20 as +, which libpq reads as a
 * plus: options=-c%20statement_timeout%3D0 was shown as options that fail to connect.
 */
function queryPasswords(search: string, as: "redacted" | "left out"): string {
  const decoded = (name: string) => {
    try {
      return decodeURIComponent(name);
    } catch {
      return name;
    }
  };
  return search
    .slice(1)
    .split("&")
    .flatMap((pair) => {
      const at = pair.indexOf("=");
      const name = at < 0 ? pair : pair.slice(0, at);
      if (!/^(ssl)?password$/i.test(decoded(name))) return [pair];
      return as === "left out" ? [] : [at < 0 ? pair : `${name}=***`];
    })
    .join("&");
}

/** ConfigError names the setting that is invalid; main prints its message as one line. */
export class ConfigError extends Error {}

/**
 * refuseOptionAsValue throws when the argument after an option is itself an option (`--name
 * --json`, the value forgotten; -h, the one short option, too), rather than taking it for the
 * value; `--name=--json` means it. A secret's argument is not repeated: it may be the secret
 * itself, starting with --.
 */
export function refuseOptionAsValue(name: string, value: string, secret = false): void {
  if (!value.startsWith("--") && value !== "-h") return;
  if (secret) throw new ConfigError(`${name} needs a value, not an option (for a value that starts with --, write ${name}=VALUE)`);
  const how = value.startsWith("--") ? "for a value that starts with --" : `for the value ${value}`;
  throw new ConfigError(`${name} needs a value, not the option ${value} (${how}, write ${name}=${value})`);
}

// The port of a postgres:// URL as written, found even where URL cannot parse it (a port past 65535),
// so the message names the port instead of calling the whole URL wrong.
const DATABASE_URL_PORT = /^postgres(?:ql)?:\/\/(?:[^/?#]*@)?(?:\[[^\]/?#]*\]|[^:/?#]*):(\d+)(?:[/?#]|$)/i;

const TRUE_WORDS = ["1", "true", "yes", "on"];
const FALSE_WORDS = ["0", "false", "no", "off", ""];

/** isBooleanText tells whether parseBoolean reads `raw` as a boolean. */
const isBooleanText = (raw: string) => [...TRUE_WORDS, ...FALSE_WORDS].includes(raw.trim().toLowerCase());

/**
 * parseBoolean reads the value of a boolean setting, or of a flag written with one (`--json=false`):
 * 1/0, true/false, yes/no, on/off in any case, empty for false; `source` names it in the refusal.
 */
export function parseBoolean(raw: string, source: string): boolean {
  const text = raw.trim().toLowerCase();
  if (TRUE_WORDS.includes(text)) return true;
  if (FALSE_WORDS.includes(text)) return false;
  throw new ConfigError(`invalid ${source}: ${JSON.stringify(raw)} is not a boolean (1/0, true/false)`);
}

/** isFlag tells whether a setting's flag may be written alone, meaning on (a boolean, --allow-private-targets); its value then follows `=`. */
export const isFlag = (setting: Setting) => setting.kind === "boolean" || setting.kind === "private-targets";

/** givenTwice is the refusal of an option given twice: neither of its values is guessed at. */
export function givenTwice(name: string): ConfigError {
  return new ConfigError(`${name} is given twice; give it once`);
}

/**
 * namesPostgresHost tells whether a database URL setting's text is a postgres:// URL with a host (its
 * port aside, which may be out of range), the one form redactedUrl knows where the password is in.
 */
function namesPostgresHost(text: string): boolean {
  if (!URL.canParse(text)) return DATABASE_URL_PORT.test(text);
  const url = new URL(text);
  return /^postgres(ql)?:$/.test(url.protocol) && url.host !== "";
}

/**
 * databaseUrlMistake says what a database URL setting's text that is not a postgres:// URL looks
 * like, without repeating any of it: it may be the password in another form (a libpq keyword
 * string, a .pgpass line, the bare password), or the secrets key given by mistake.
 */
function databaseUrlMistake(text: string): string {
  // crm.env's line moved into database_url_file as it was, which upgrade note 12 has them do with the URL.
  if (/^[a-z_][a-z0-9_]*=\s*["']?postgres(ql)?:/i.test(text)) return "it starts with a variable's name and =, as a line of crm.env does: the URL goes alone, without NAME= or quotes";
  if (/^["']\s*postgres(ql)?:/i.test(text)) return "it is in quotes: the URL goes alone, without them";
  if (/^[a-z_]+\s*=/i.test(text)) return "it looks like a libpq keyword string, host=... password=...";
  if (/^[a-z][a-z0-9+.:-]*:\/\//i.test(text)) return "it is a URL of another kind";
  if (/^[^:\s]+:[^:\s]*:[^:\s]*:[^:\s]*:./.test(text)) return "it looks like a .pgpass line, HOST:PORT:DATABASE:USER:PASSWORD";
  return "it is not a URL";
}

/**
 * numberOf reads a setting's digits, and inf as TOML writes it (fileNumberText: 1e400 is read so),
 * as Infinity: like digits past a double, it is past a bounded setting's range, which its refusal
 * names as 1e21's does, rather than saying it is no number.
 */
const numberOf = (text: string): number => (text === "inf" ? Infinity : Number(text));

function parseValue(setting: Setting, raw: unknown, source: string): unknown {
  const text = String(raw).trim();
  // A secret is never echoed, not even a malformed one: this line ends up in logs. Nor is a database
  // URL's text unless it is one whose password redactedUrl can find.
  const hidden = setting.kind === "secret" || (setting.kind === "database-url" && !namesPostgresHost(text));
  const shown = () => (hidden ? "the value" : JSON.stringify(setting.kind === "database-url" ? redactedUrl(text) : String(raw)));
  const fail = (expected: string): never => {
    throw new ConfigError(`invalid ${source}: ${shown()} is not ${expected}`);
  };
  switch (setting.kind) {
    case "string":
      return text;
    case "port": {
      const n = Number(text);
      if (!/^\d+$/.test(text) || n > 65535) fail("a port number (0-65535)");
      return n;
    }
    case "positive-int": {
      const n = numberOf(text);
      if (!/^(\d+|inf)$/.test(text) || n < 1) fail("a positive whole number");
      // A bounded setting's range is named first: a number past it is no less out of range for being past 2^53 too.
      if (setting.max !== undefined && n > setting.max) fail(`a whole number from 1 to ${setting.max}`);
      if (!Number.isSafeInteger(n)) fail("a positive whole number");
      return n;
    }
    case "whole": {
      const n = numberOf(text);
      if (!/^(\d+|inf)$/.test(text)) fail("a whole number (0 or more)");
      if (setting.max !== undefined && n > setting.max) fail(`a whole number from 0 to ${setting.max}`);
      if (!Number.isSafeInteger(n)) fail("a whole number (0 or more)");
      return n;
    }
    case "number": {
      const n = numberOf(text);
      if (!/^(\d+(\.\d+)?|inf)$/.test(text)) fail("a number (0 or more)");
      if (setting.max !== undefined && n > setting.max) fail(`a number from 0 to ${setting.max}`);
      if (!Number.isFinite(n)) fail("a number (0 or more)");
      return n;
    }
    case "boolean":
      return parseBoolean(String(raw), source);
    case "choice":
      if (!setting.choices!.includes(text)) fail(`one of ${setting.choices!.join(", ")}`);
      return text;
    case "seconds-list": {
      // Only crm.toml's list with nothing in it (retry_schedule = []) comes here empty (an empty value is refused before): a
      // failed delivery is always retried, so a schedule with no delay is a mistake, not "never retry".
      if (text === "") {
        throw new ConfigError(`invalid ${source}: the list is empty; give at least one delay in seconds (each 0 to ${setting.max}: a failed delivery is always retried), or remove the line to use the default, ${String(DEFAULT_CONFIG[setting.key])}`);
      }
      const parts = text.split(",").map((p) => p.trim());
      const values = parts.map(numberOf);
      if (parts.length === 0 || parts.some((p) => !/^(\d+(\.\d+)?|inf)$/.test(p))) fail("a comma-separated list of seconds");
      if (setting.max !== undefined && values.some((v) => v > setting.max!)) fail(`a comma-separated list of seconds, each from 0 to ${setting.max}`);
      if (values.some((v) => !Number.isFinite(v))) fail("a comma-separated list of seconds");
      return values;
    }
    case "secret":
      if (!/^[\x21-\x7e]{16,200}$/.test(text)) fail("16 to 200 printable ASCII characters without spaces");
      return text;
    case "database-url": {
      const port = DATABASE_URL_PORT.exec(text)?.[1];
      if (port !== undefined && !(Number(port) >= 1 && Number(port) <= 65535)) throw new ConfigError(`invalid ${source}: ${shown()} has port ${port}; the port must be 1 to 65535`);
      if (!(URL.canParse(text) && /^postgres(ql)?:$/.test(new URL(text).protocol))) fail(`a postgres:// or postgresql:// URL (${databaseUrlMistake(text)}); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE`);
      // postgres: is no special scheme to URL: with a slash missing it takes the rest for a path.
      if (new URL(text).host === "") fail("a postgres:// URL with a host (is a slash missing after postgres:?); write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE");
      if (userCutShort(new URL(text))) fail("a postgres:// URL whose user and password are percent-encoded (an @ after the host: write each /, ?, # and @ in them as %2F, %3F, %23, %40)");
      return text;
    }
    case "private-targets": {
      if (isBooleanText(String(raw))) return parseBoolean(String(raw), source);
      const networks = text.split(",").map((p) => p.trim());
      const wrong = networks.map(networkError).find((error) => error !== null);
      if (wrong) fail(`1 (every non-public address) or a comma-separated list of networks such as 10.0.0.0/8,fd12::/16: ${wrong}`);
      return networks;
    }
    case "address-list": {
      const parts = text === "" ? [] : text.split(",").map((p) => p.trim());
      if (parts.some((p) => isIP(p) === 0)) fail("a comma-separated list of IP addresses");
      return parts;
    }
  }
}

function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    // A file the user may not read (or in a directory they may not enter) is not a missing one.
    throw new ConfigError(isAbsent(error) ? `config file ${path} does not exist` : `cannot read config file ${path}: ${fileErrorText(error)}`);
  }
  try {
    return Bun.TOML.parse(text) as Record<string, unknown>;
  } catch (error) {
    // Bun quotes the offending value, and an unquoted metrics_token is one: it is not repeated.
    throw new ConfigError(`config file ${path} is not valid TOML: line ${tomlErrorLine(text)}: ${(error as Error).message.replace(/^TOML Parse error: /, "").replace(/: ".*"$/s, "")}`);
  }
}

/**
 * tomlErrorLine finds the line of a TOML text's mistake, which Bun's error does not give (its line
 * and column are the caller's): the line after the longest prefix of whole lines that parses. A
 * config file is a few dozen lines, so parsing prefixes costs nothing; a multi-line value left
 * open is named where it starts, as every prefix ending inside it fails too.
 */
function tomlErrorLine(text: string): number {
  const lines = text.split("\n");
  for (let kept = lines.length - 1; kept > 0; kept--) {
    try {
      Bun.TOML.parse(lines.slice(0, kept).join("\n"));
      return kept + 1;
    } catch {
      // That prefix holds the mistake too: a shorter one is tried.
    }
  }
  return 1;
}

/** LIST_KINDS are the settings that take a list: in crm.toml a TOML array, or one comma-separated string. */
const LIST_KINDS: ReadonlySet<Kind> = new Set(["seconds-list", "address-list", "private-targets"]);

/**
 * fileValueText is a crm.toml value as the text a flag would give: a string, number or boolean,
 * or for a list setting an array of them. A table or a nested array is refused, not turned into
 * "[object Object]" or flattened; so is an empty item, as refuseEmpty refuses an empty value: the
 * same unfilled template (trusted_proxies = ["${LB_IP}"], LB_IP unset), which joined into "" read as
 * no proxy, or for allow_private_targets as false.
 */
function fileValueText(setting: Setting, raw: unknown, source: string): string {
  const scalar = (value: unknown) => typeof value === "string" || typeof value === "boolean" || typeof value === "number";
  const text = (value: unknown) => (typeof value === "number" ? fileNumberText(value) : String(value));
  if (scalar(raw)) return text(raw);
  if (!LIST_KINDS.has(setting.kind)) throw new ConfigError(`invalid ${source}: expected a string, number or boolean, not ${Array.isArray(raw) ? "a list" : "a table"}`);
  if (Array.isArray(raw) && raw.some((item) => typeof item === "string" && item.trim() === "")) {
    const nothing = setting.kind === "seconds-list" ? "" : ` (${fileKey(setting)} = [] is a list with nothing in it)`;
    throw new ConfigError(`invalid ${source}: an item of the list is set but empty; give it a value, or remove it${nothing}`);
  }
  if (Array.isArray(raw) && raw.every(scalar)) return raw.map(text).join(",");
  throw new ConfigError(`invalid ${source}: expected a list of numbers or strings, or one comma-separated string`);
}

/**
 * fileNumberText writes a crm.toml number in the digits a flag would give: String writes 1e-7,
 * which TOML reads from 1e-7 and 0.0000001 alike, and 1e21 and up with an exponent too, so a
 * number out of a setting's range, or not whole, was refused as not a number at all; inf and nan
 * as TOML writes them, each then refused with what the setting takes.
 */
function fileNumberText(value: number): string {
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
  const [mantissa, exponent] = String(value).split("e");
  if (exponent === undefined) return mantissa!;
  const sign = mantissa!.startsWith("-") ? "-" : "";
  const [whole, fraction = ""] = mantissa!.replace("-", "").split(".");
  const digits = `${whole}${fraction}`;
  // String uses an exponent only below 1e-6, where the point falls before every digit, and from 1e21, where it falls after them.
  const point = whole!.length + Number(exponent);
  return `${sign}${point <= 0 ? `0.${"0".repeat(-point)}${digits}` : digits.padEnd(point, "0")}`;
}

/** fileKey is the name of a setting in crm.toml: the flag without dashes, with underscores. */
export function fileKey(setting: Setting): string {
  return setting.flag.replace(/^--/, "").replaceAll("-", "_");
}

/**
 * refuseEmpty refuses a setting's value written empty, from a flag, the environment or crm.toml
 * alike: it is an unfilled template or an unset variable expanded (compose's ${X}, envsubst), never
 * a choice. Taken as a value it chose SQLite over crm.toml's database; taken as unset it would hide
 * the mistake. A TOML list with nothing in it (trusted_proxies = []) is written so on purpose.
 */
function refuseEmpty(raw: unknown, source: string, instead: string): void {
  if (typeof raw === "string" && raw.trim() === "") throw new ConfigError(`invalid ${source}: it is set but empty; give it a value, or ${instead}`);
}

/**
 * readDatabaseUrlFile reads the database URL from database_url_file: crm.toml names the file, so
 * every command given --config reaches the database the service uses, while the password stays
 * in a file only the service's user reads (crm.env, systemd's, is read by the service alone).
 */
function readDatabaseUrlFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8").trim();
  } catch (error) {
    if (isAbsent(error)) throw new ConfigError(`database URL file ${path} (--database-url-file, CRM_DATABASE_URL_FILE) does not exist`);
    // Another user's file (root's, installed without -o crm) is named with its fix, as the secrets key is: serve already runs as the service's user.
    throw new ConfigError(`database URL file ${path} cannot be read: ${notOwnedText(path, path) ?? fileErrorText(error)}`);
  }
  const onOneLine = "put the postgres:// URL in it, on one line";
  if (text === "") throw new ConfigError(`database URL file ${path} is empty: ${onOneLine}`);
  // URL parsing drops line breaks: two URLs would be read as one.
  if (/[\r\n]/.test(text)) throw new ConfigError(`database URL file ${path} holds more than one line: ${onOneLine}`);
  return parseValue(settingOf("databaseUrl"), text, `database URL file ${path}`) as string;
}

/** databaseUrlFileOpenTo words the warning of a database URL file other users may read (openToOthers), or null; serve logs it, a command prints it. */
export function databaseUrlFileOpenTo(config: Pick<Config, "databaseUrlFile">): string | null {
  if (!config.databaseUrlFile) return null;
  return openToOthers(config.databaseUrlFile, "the database URL file", "whoever may read it logs in to the database as the service, to every contact, user and sealed secret");
}

/**
 * OTHER_PROGRAMS_VARIABLES are the CRM_ variables the READMEs tell users to set for this
 * repository's other programs: the client's (CRM_URL, CRM_TOKEN), the example receiver's
 * (CRM_WEBHOOK_SECRET), the tests' (CRM_TEST_BACKEND, CRM_TEST_CHROMIUM). Set as told, in the
 * shell that also runs crm, they were warned of at every command as settings misspelt.
 */
const OTHER_PROGRAMS_VARIABLES = ["CRM_URL", "CRM_TOKEN", "CRM_WEBHOOK_SECRET", "CRM_TEST_BACKEND", "CRM_TEST_CHROMIUM"];

/**
 * unknownEnvironmentText words the warning of CRM_ environment variables that name no setting
 * (CRM_PORT, where the port's is PORT; a misspelt CRM_DATABSE_URL), or null: each is ignored, and
 * the service ran on the file's value or the default with nothing said. Warned of rather than
 * refused, as an unknown crm.toml key is: the environment is shared with other programs. The
 * variables of this repository's other programs are not warned of (OTHER_PROGRAMS_VARIABLES).
 * Serve logs it, a command prints it.
 */
export function unknownEnvironmentText(env: Record<string, string | undefined>): string | null {
  const known = new Set(["CRM_CONFIG", ...OTHER_PROGRAMS_VARIABLES, ...SETTINGS.map((s) => s.env)]);
  const unknown = Object.keys(env).filter((name) => name.startsWith("CRM_") && !known.has(name)).sort();
  if (unknown.length === 0) return null;
  const named = unknown.length === 1 ? "names no setting and is ignored" : "name no setting and are ignored";
  const port = unknown.includes("CRM_PORT") ? ` (the port's variable is ${settingOf("port").env})` : "";
  return `${unknown.join(", ")} in the environment ${named}${port}; --help lists the settings' variables`;
}

/**
 * configFileOpenTo words the warning of a --config file holding database_url or metrics_token that
 * every user may read, or null: its group may (README installs it root:crm 0640). Serve logs it, a
 * command prints it.
 */
export function configFileOpenTo(config: Pick<Config, "configFileSecrets">): string | null {
  const held = config.configFileSecrets;
  const mode = held ? (statIfThere(held.path)?.mode ?? 0) & 0o777 : 0;
  if (!held || (mode & 0o007) === 0) return null;
  return `the config file ${held.path} holds ${held.keys.join(" and ")} and every user may read it (mode 0${mode.toString(8)}): whoever does has them; make it unreadable to others: chmod o-rwx ${held.path} (or move them to database_url_file and the environment)`;
}

/**
 * loadConfig resolves every setting from flags, then environment, then an optional TOML config
 * file (`--config` or CRM_CONFIG), then defaults. Unknown flags and bad values throw ConfigError.
 * `only`: the settings a command reads, the others left at their defaults unread (import, an API
 * client, reads the log level alone: the service's database URL file is not its to open).
 */
export function loadConfig(args: string[], env: Record<string, string | undefined> = process.env, only?: ReadonlySet<keyof Config>): Config {
  const flags = new Map<string, string>();
  let configPath = env.CRM_CONFIG;
  let configFlagGiven = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const [name, inline] = arg.includes("=") ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)] : [arg, undefined];
    const setting = SETTINGS.find((s) => s.flag === name);
    if (name === "--config") {
      if (configFlagGiven) throw givenTwice(name);
      configFlagGiven = true;
      configPath = inline ?? args[++i];
      if (!configPath) throw new ConfigError("--config needs a file path");
      if (inline === undefined) refuseOptionAsValue(name, configPath);
      continue;
    }
    if (!setting) throw new ConfigError(`unknown option ${name} (see --help)`);
    // A flag given twice (a script adding to a command line) is refused, as a command's option is: which was meant is not guessed.
    if (flags.has(name)) throw givenTwice(name);
    if (isFlag(setting) && inline === undefined) {
      // Its value is never the next argument, which would be taken for a command's: the flag alone means on.
      const next = args[i + 1];
      if (setting.kind === "private-targets" && next !== undefined && !next.startsWith("-")) {
        // A blank one ("$NETS" unset) is not shown as the example: written after =, it is refused as empty.
        throw new ConfigError(`${name} takes its networks after =, as in ${name}=${next.trim() === "" ? "NETWORKS" : next} (alone it allows every non-public address)`);
      }
      flags.set(name, "true");
      continue;
    }
    const value = inline ?? args[++i];
    if (value === undefined) throw new ConfigError(`${name} needs a value`);
    if (inline === undefined) refuseOptionAsValue(name, value, setting.kind === "secret");
    flags.set(name, value);
  }
  if (!configFlagGiven && configPath !== undefined && configPath.trim() === "") throw new ConfigError("invalid CRM_CONFIG: it is set but empty; give it a file path, or unset it to read no config file");
  const file = configPath ? readConfigFile(configPath) : {};
  const knownFileKeys = new Set(SETTINGS.map(fileKey));
  for (const key of Object.keys(file)) {
    if (!knownFileKeys.has(key)) throw new ConfigError(`unknown setting ${key} in ${configPath}`);
  }
  const config: Record<string, unknown> = { ...DEFAULT_CONFIG };
  const inFile = (setting: Setting) => !flags.has(setting.flag) && env[setting.env] === undefined && fileKey(setting) in file;
  for (const setting of SETTINGS) {
    if (only && !only.has(setting.key)) continue;
    if (flags.has(setting.flag)) {
      refuseEmpty(flags.get(setting.flag), setting.flag, `leave the option out to use ${setting.env}, ${fileKey(setting)} from the --config file or the default`);
      config[setting.key] = parseValue(setting, flags.get(setting.flag), setting.flag);
    } else if (env[setting.env] !== undefined) {
      refuseEmpty(env[setting.env], setting.env, `unset it to use ${fileKey(setting)} from the --config file or the default`);
      config[setting.key] = parseValue(setting, env[setting.env], setting.env);
    } else if (fileKey(setting) in file) {
      const source = `${fileKey(setting)} in ${configPath}`;
      refuseEmpty(file[fileKey(setting)], source, "remove the line to use the default");
      const value = parseValue(setting, fileValueText(setting, file[fileKey(setting)], source), source);
      // As the file's own directory, not the shell's: `crm ... --config /opt/crm/crm.toml` run from
      // elsewhere made a second database there, and a token the server answered 401 to.
      config[setting.key] = setting.path ? resolve(dirname(configPath!), value as string) : value;
    }
  }
  const urlSetting = settingOf("databaseUrl");
  const urlFileSetting = settingOf("databaseUrlFile");
  // Held in the file whether or not a flag or the environment overrides them.
  const heldKeys = [urlSetting, settingOf("metricsToken")].map(fileKey).filter((key) => key in file);
  if (heldKeys.length > 0) config.configFileSecrets = { path: resolve(configPath!), keys: heldKeys };
  // A command given the service's crm.toml reaches its database with --config, the password kept out of argv.
  const byConfig = () => ({ reach: ["--config", resolve(configPath!)] });
  if (config.databaseUrlFile) {
    if (config.databaseUrl) throw new ConfigError("the database URL is given twice, by database_url (--database-url, CRM_DATABASE_URL) and by database_url_file (--database-url-file, CRM_DATABASE_URL_FILE); give one");
    const path = config.databaseUrlFile as string;
    config.databaseUrl = readDatabaseUrlFile(path);
    const by = inFile(urlFileSetting) ? `${fileKey(urlFileSetting)} in ${configPath}` : flags.has(urlFileSetting.flag) ? urlFileSetting.flag : urlFileSetting.env;
    config.databaseUrlFrom = { named: `the file ${path} that ${by} names`, ...(inFile(urlFileSetting) ? byConfig() : { reach: [urlFileSetting.flag, resolve(path)] }) };
  } else if (config.databaseUrl && inFile(urlSetting)) {
    config.databaseUrlFrom = { named: `${fileKey(urlSetting)} in ${configPath}`, ...byConfig() };
  }
  return config as unknown as Config;
}
