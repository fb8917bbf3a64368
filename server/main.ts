#!/usr/bin/env bun
import { fstatSync, readFileSync, rmSync, statSync, type Stats } from "node:fs";
import { constants } from "node:os";
import { resolve } from "node:path";
import { ConfigError, DEFAULT_CONFIG, SETTINGS, configFileOpenTo, databaseUrlFileOpenTo, fileKey, givenTwice, isFlag, loadConfig, parseBoolean, refuseOptionAsValue, unknownEnvironmentText, urlWithoutPassword, type Config } from "./config.ts";
import { databaseFailureOf, databaseFaultOf, migrateAlone, migrateBackend, openBackend, refuseNewerDatabase, type Backend } from "./db/backend.ts";
import { dataDirectoryLockFile, databaseFile, databasePath, isSqliteBusy, lockDataDirectory, openDatabase, WRITE_LOCK_WAIT_MS, type SqliteDatabase } from "./db/database.ts";
import { MigrationFailed, pendingMigrations } from "./db/migrations.ts";
import { PartlyDone } from "./db/sql.ts";
import { assertDatabaseSecretsKey, findStoredKey, isDatabaseSecretsKey, loadSecretsKey, SecretBox, secretsKeyExists, secretsKeyOpenTo, secretsKeyPath } from "./webhooks/secrets.ts";
import { BATCH_ROWS } from "./db/sql.ts";
import { failResetDeliveries, previewSecretsKeyReset, resetSecretsKey, rotateSecretsKey, type NothingLost, type ResetSubscription } from "./webhooks/service.ts";
import { checkFetchLimit, DELIVERY_CHANNEL } from "./webhooks/worker.ts";
import { checkTokenName, createApiToken, findToken, listTokens, makerNames, revokeApiToken, tokenRate, type ApiTokenInfo } from "./auth/service.ts";
import { commandOrigin, MADE_BY_WORDS, madeByText } from "./shared/made-by.ts";
import { MAX_TOKEN_RATE, parseTokenRate } from "./limits/rate-limiter.ts";
import { allUsers, createUser, deleteUser } from "./users/service.ts";
import { eraseDeletedRecord, type ErasableResource } from "./tombstones/service.ts";
import { UNLINK_CHUNK } from "./contacts/service.ts";
import { createOperator, operatorSummaries, resetOperatorPassword, unlockOperator } from "./operators/service.ts";
import { forgetOperatorEmail, removeOperatorByEmail, type OperatorMade, type Removal } from "./operators/removal.ts";
import { readPasswordInput } from "./operators/password-input.ts";
import { flushLogs } from "./shared/log.ts";
import { OutputFailed, printOut } from "./shared/output.ts";
import { printable } from "./shared/text.ts";
import { errorCode } from "./shared/thrown.ts";
import { fileErrorText, isAbsent, notOwnedText, pathExists, statIfThere } from "./shared/files.ts";
import { ProblemError } from "./shared/problem.ts";
import { BackupError, backupDatabase } from "./ops/service.ts";
import { vacuumInPlace } from "./ops/store.ts";
import { sameBytes } from "./shared/crypto.ts";
import { COPY_USAGE, copyToPostgresCommand } from "./db/copy-to-postgres.ts";
import { readOnlyWriteRefusal } from "./db/postgres.ts";
import { ImportError } from "./import/client.ts";
import { isLoopbackHost } from "./http/client-address.ts";
import { importContacts, importCounts } from "./import/service.ts";
import { commandHere, shellWord, startServer } from "./server.ts";
import { BUILD } from "./version.ts";

const HELP = `crm ${BUILD}: CRM contacts API with signed webhook deliveries

Usage: crm [command] [options]

Commands:
  serve                              run the HTTP server (default)
  migrate                            apply pending database migrations and exit
  token create --name N [--json] [--rate R[:B],W[:B]]
                                     create an API token; it is printed once, on stdout;
                                     --rate: its own reads and writes per second (burst B,
                                     default twice the rate; each at most 1,000,000)
  token list                         list API tokens and who made each (never the token itself)
  token revoke ID                    revoke an API token
  user create --name N --email E     add a user contacts can be assigned to
  user list                          list users: id, email, name, created
  user delete ID                     delete a user; its contacts lose the assignment (each
                                     sends contact.updated); on SQLite, not while serve runs
  contact erase ID, account erase ID
                                     erase what a deleted contact's (account's) earlier events
                                     hold of it; their pending deliveries end unsent
  operator create --email E --password-stdin
                                     add a console operator; the password is the first line of
                                     stdin (at a terminal: asked for, not shown)
  operator list                      list console operators: id, email, created, last seen
  operator remove --email E [--revoke-tokens] [--disable-subscriptions]
                                     remove an operator, end their sessions and withdraw the
                                     one-time links they made (not the last one); as the
                                     console's boxes, also revoke the API tokens they made and
                                     disable the subscriptions they made (on SQLite, not while
                                     serve runs); lists what they made that stays
  operator forget --email E          erase a removed operator's email (an erasure request):
                                     where it is kept, as who made a token, a subscription or
                                     a change, it is replaced in one write, and the console
                                     says "an operator (removed, forgotten)"; lists how many
                                     of each; refused for a current operator
  operator reset-password --email E --password-stdin
                                     set an operator's password (read from stdin), end their
                                     sessions and withdraw their pending reset link
  operator unlock --email E          forget the failed sign-ins counted against an operator, so
                                     addresses slowed by them may try again at once
  backup FILE                        copy the database into a new FILE; safe while serving
  secrets-key rotate --new-key-file FILE
                                     seal every signing secret anew with the key in FILE and
                                     make it the database's (the service stopped); then start
                                     every instance with FILE: the old key is refused
  secrets-key reset [--yes-disable-every-subscription]
                                     when the secrets key is lost: give every webhook
                                     subscription a new secret under the key the next start
                                     reads and disable it until its secret is rotated; lists
                                     them, and without the flag changes nothing
  copy-to-postgres --database-url-file FILE
                                     copy the data directory's database into the empty
                                     PostgreSQL database FILE names (see copy-to-postgres --help)
  import contacts FILE.csv|FILE.jsonl --url URL --token-file F [--map "Col=field,..."]
         [--trial] [--dry-run] [--invalid-file PATH] [--allow-plain-http]
                                     import contacts (and their accounts) through a server's
                                     batch API; safe to run again after a crash; exit 1 when
                                     some rows were invalid (they are written to PATH); an
                                     http:// URL to another machine is refused without
                                     --allow-plain-http: the token would cross unencrypted;
                                     of the settings it reads --log-level alone (or --config's)
  --version                          print the version
  --help                             print this help

Options (flag, environment variable, crm.toml key; flags win over environment over file; a value
written empty, in any of them, is refused: leave it out to use the next one's):
${SETTINGS.map((s) => `  ${`${s.flag} ${isFlag(s) ? "" : "VALUE"}`.padEnd(34)} ${s.env.padEnd(28)} ${fileKey(s).padEnd(24)} ${s.help} (default: ${String(DEFAULT_CONFIG[s.key]) || (s.unset ?? "none")})`).join("\n")}
  --config FILE                      CRM_CONFIG                   TOML file with the settings above

Exit status:
  0  done (with a warning on stderr when the service finishes what was left: a secrets-key reset
     whose writes failing its pending deliveries were refused after it committed)
  1  not done, with a reason on stderr: some rows invalid (import), a backup that failed or whose
     file exists, a token not found or already revoked (token revoke), output not written
  2  usage mistake or refused, nothing changed: an unknown option, an invalid setting, no database
     there, the data directory in use, a record not found or already there
  3  the database is busy or cannot be reached just now: try again later
  141  the reader of its output left (crm token list | head -1), quietly, as after a SIGPIPE
`;

/** EXIT are the command line's exit statuses, as --help and README's Command line list them. */
const EXIT = { done: 0, notDone: 1, refused: 2, unavailable: 3 } as const;

const OPERATOR_USAGE = "usage: operator list | operator create --email E --password-stdin | operator remove --email E [--revoke-tokens] [--disable-subscriptions] | operator forget --email E | operator reset-password --email E --password-stdin | operator unlock --email E";

/** COMMAND_VALUE_OPTIONS are the commands' own options that take a value (takeOption takes no other). */
const COMMAND_VALUE_OPTIONS = ["--name", "--email", "--rate", "--url", "--token-file", "--map", "--invalid-file", "--new-key-file"] as const;

/** VALUE_OPTIONS are the options whose next argument is their value: the settings but the flags (isFlag), --config and the commands' own. */
const VALUE_OPTIONS: ReadonlySet<string> = new Set(["--config", ...SETTINGS.filter((s) => !isFlag(s)).map((s) => s.flag), ...COMMAND_VALUE_OPTIONS]);

/**
 * asksFor tells whether args hold one of `words` as an option. The next argument of an option that
 * takes a value is that value, not a request: `--name --version` is the name forgotten, refused as such.
 */
function asksFor(args: string[], words: readonly string[]): boolean {
  return args.some((arg, i) => words.includes(arg) && !(i > 0 && VALUE_OPTIONS.has(args[i - 1]!)));
}

/**
 * takeOption removes `--name value` from args and returns the value; the option given twice is
 * refused, not one of its values guessed. A next argument that is an option (`--name --json`,
 * the value forgotten) is refused too rather than taken as the value; `--name=--json` means it.
 */
function takeOption(args: string[], name: (typeof COMMAND_VALUE_OPTIONS)[number] | "--config" | "--log-level"): string | undefined {
  const isOption = (a: string) => a === name || a.startsWith(`${name}=`);
  const i = args.findIndex(isOption);
  if (i < 0) return undefined;
  const [arg] = args.splice(i, 1);
  const value = arg!.includes("=") ? arg!.slice(arg!.indexOf("=") + 1) : args.splice(i, 1)[0];
  if (value === undefined) throw new ConfigError(`${name} needs a value`);
  if (!arg!.includes("=")) refuseOptionAsValue(name, value);
  if (args.some(isOption)) throw givenTwice(name);
  return value;
}

/**
 * commandFirst moves the command word, with everything after it, ahead of the options written
 * before it (`crm --log-level warn migrate`). The value of an option that takes one is never
 * taken for the command.
 */
function commandFirst(args: string[]): string[] {
  for (let i = 0; i < args.length; i++) {
    if (!args[i]!.startsWith("-")) return [...args.slice(i), ...args.slice(0, i)];
    if (VALUE_OPTIONS.has(args[i]!)) i++;
  }
  return args;
}

/**
 * takeFlag removes the flag `name` from args and tells whether it was given; written with a value
 * (`--json=false`) it takes that value, as a boolean setting does. Given twice, it is refused.
 */
function takeFlag(args: string[], name: string): boolean {
  const isFlag = (a: string) => a === name || a.startsWith(`${name}=`);
  const i = args.findIndex(isFlag);
  if (i < 0) return false;
  const [arg] = args.splice(i, 1);
  if (args.some(isFlag)) throw givenTwice(name);
  return arg === name || parseBoolean(arg!.slice(name.length + 1), name);
}

/** stdoutDiscarded tells whether stdout goes nowhere: /dev/null, or closed (Bun opens /dev/null in its place). */
function stdoutDiscarded(): boolean {
  try {
    const out = fstatSync(1);
    return out.isCharacterDevice() && out.rdev === statSync("/dev/null").rdev;
  } catch {
    return true;
  }
}

/**
 * stackShown tells whether an unexpected error prints its stack: the command's --log-level is
 * debug, from any of its sources once its settings are read (commandSettings), CRM_LOG_LEVEL's
 * before that.
 */
let stackShown = process.env.CRM_LOG_LEVEL?.trim() === "debug";

/** commandSettings reads a command's settings (loadConfig; `only` those), noting whether they ask for an unexpected error's stack. */
function commandSettings(args: string[], only?: ReadonlySet<keyof Config>): Config {
  const config = loadConfig(args, process.env, only);
  stackShown = config.logLevel === "debug";
  return config;
}

/**
 * loadCommandConfig resolves a command's settings and reads a key file named by --secrets-key-file
 * at once: most commands never open the key (a migrated database has nothing to seal), and would
 * otherwise accept a missing or broken file that `serve` then refuses. A command warns of a
 * secrets key or database URL file other users may read (noteSettingsWarnings); `serving`: serve logs them instead.
 */
function loadCommandConfig(args: string[], { serving = false }: { serving?: boolean } = {}): Config {
  const config = commandSettings(args);
  if (config.secretsKeyFile) loadSecretsKey(config);
  if (!serving) noteSettingsWarnings(config);
  return config;
}

/**
 * noteSettingsWarnings warns on stderr of CRM_ variables that name no setting (unknownEnvironmentText) and of a
 * secrets key, database URL file or --config file holding secrets that other users may read (secretsKeyOpenTo,
 * databaseUrlFileOpenTo, configFileOpenTo), as serve logs them; the command goes on.
 */
function noteSettingsWarnings(config: Config): void {
  for (const warning of [unknownEnvironmentText(process.env), secretsKeyOpenTo(config), databaseUrlFileOpenTo(config), configFileOpenTo(config)]) if (warning) process.stderr.write(`crm: ${warning}\n`);
}

/**
 * migrateWithSecretsKey migrates; a migration that seals signing secrets reads (or creates) the
 * secrets key (commandSecrets). What a migration tells the operator goes to stderr (commandWarn).
 */
function migrateWithSecretsKey(db: Backend, config: Config): Promise<string[]> {
  return migrateBackend(db, commandSecrets(config), commandWarn);
}

/** commandSecrets opens the secrets key for a command's migration; a key it creates is named on stderr, as serve logs it: it must be kept with the database. */
function commandSecrets(config: Config): () => SecretBox {
  return () => {
    const secretsKey = loadSecretsKey(config);
    if (secretsKey.created) noteCreatedSecretsKey(secretsKey.path);
    return new SecretBox(secretsKey.key);
  };
}

/** commandWarn prints what a command's migration tells the operator on stderr, one line each. */
function commandWarn(message: string, fields: Record<string, unknown>): void {
  // The fields may hold names as the API stored them: escaped, so none acts on the terminal.
  process.stderr.write(`crm: ${message}: ${printable(JSON.stringify(fields))}\n`);
}

/** noteCreatedSecretsKey names on stderr a secrets key a command created, as serve logs it: it must be kept with the database. */
function noteCreatedSecretsKey(path: string): void {
  process.stderr.write(`crm: created the key that encrypts webhook signing secrets, ${path}; keep it with the database: backups do not include it\n`);
}

/**
 * databaseSecrets reads the secrets key for a command that needs it (the sign-in throttle keeps
 * emails under it), refusing a key that is not the database's as serve does: with another key the
 * command would quietly find nothing it looked for.
 */
async function databaseSecrets(db: Backend, config: Config): Promise<SecretBox> {
  const secretsKey = loadSecretsKey(config);
  const secrets = new SecretBox(secretsKey.key);
  await assertDatabaseSecretsKey(db, secrets, secretsKey);
  if (secretsKey.created) noteCreatedSecretsKey(secretsKey.path);
  return secrets;
}

/**
 * whileHoldingDataDirectory runs `work` holding the data directory (lockDataDirectory); while a
 * serve, or another command that needs it to itself, holds it, the command is refused, `why` saying why.
 */
async function whileHoldingDataDirectory<T>(config: Config, why: string, work: () => Promise<T>): Promise<T> {
  const unlock = lockDataDirectory(config.dataDir);
  if (!unlock) {
    throw new ConfigError(`the data directory ${JSON.stringify(config.dataDir)} is in use by a running crm serve, or a migrate or copy-to-postgres under way (it holds ${dataDirectoryLockFile(config.dataDir)}): ${why}`);
  }
  try {
    return await work();
  } finally {
    unlock();
  }
}

/**
 * migrateDataDirectory applies the SQLite migrations a command finds pending in `db`, holding the
 * data directory as serve does while it changes the schema: a serve still running there (the old
 * version, during an upgrade) would have its schema changed under it, so the command is refused
 * instead, as it is while any other process has the database open (migrateAlone: a serve from
 * before 2026-11-27 holds no crm.lock). With nothing pending it takes no lock, works beside a
 * running serve and returns `db`; else `db` is closed for migrateAlone, which its own connections
 * would fail, and the database returned is opened anew. `locked`: the caller holds the directory already.
 */
async function migrateDataDirectory(db: SqliteDatabase, config: Config, { locked = false }: { locked?: boolean } = {}): Promise<{ db: SqliteDatabase; applied: string[] }> {
  const pending = pendingMigrations(db.sqlite).map((m) => m.name);
  // With nothing to apply, migrateBackend (which refuses a database a newer crm migrated) is not called.
  if (pending.length === 0) {
    await refuseNewerDatabase(db);
    return { db, applied: [] };
  }
  await db.close();
  const migrateThenOpen = async () => {
    const file = resolve(databaseFile(config.dataDir));
    const applied = await migrateAlone(file, config.synchronous, pending, commandSecrets(config), commandWarn);
    return { db: openDatabase(file, config.synchronous), applied };
  };
  return locked ? migrateThenOpen() : whileHoldingDataDirectory(config, `stop it before the schema is changed (pending: ${pending.join(", ")})`, migrateThenOpen);
}

/**
 * databaseExists tells whether a data directory holds a database. One the command may not look at
 * (the service's 0700 directory, run as another user) is refused in one line, not called missing.
 */
function databaseExists(dataDir: string): boolean {
  const file = resolve(databaseFile(dataDir));
  try {
    return pathExists(file);
  } catch (error) {
    throw new ConfigError(`cannot open the database ${file} (--data-dir, CRM_DATA_DIR): ${notOwnedText(file, dataDir) ?? fileErrorText(error)}`);
  }
}

/**
 * requireDatabase refuses a data directory without a database. Only serve and migrate create one
 * (migrate not in a data_dir only the --config file names, as the set-up commands do not):
 * a token or user written to a new, empty database next to the running server's would be
 * silently useless (the token would get 401). The service may be on PostgreSQL, its URL where this
 * command did not look (crm.env, which only systemd reads): the refusal says where it goes.
 */
function requireDatabase(dataDir: string): void {
  if (!databaseExists(dataDir)) {
    throw new ConfigError(
      `no database at ${resolve(databaseFile(dataDir))}; pass the running server's data directory with --data-dir DIR (or CRM_DATA_DIR, or data_dir in the --config file), or create one with: ${commandHere(["migrate", "--data-dir", "DIR"], null)}; ` +
        "on PostgreSQL, give the database's URL (CRM_DATABASE_URL, or database_url or database_url_file in the --config file)",
    );
  }
}

/**
 * dataDirNamedHere tells whether the command line or the environment names the data directory
 * (--data-dir, CRM_DATA_DIR): chosen for this run, as an install script does. A config file's
 * data_dir is not: on several instances the service's crm.toml names one that PostgreSQL leaves
 * empty, and a database a command created there went unseen.
 */
function dataDirNamedHere(args: string[]): boolean {
  return args.some((arg) => arg === "--data-dir" || arg.startsWith("--data-dir=")) || process.env.CRM_DATA_DIR !== undefined;
}

/**
 * openDataDirDatabase opens and migrates the SQLite database of an existing data directory. A
 * command that sets a new installation up (`setUp`: token, user or operator create, given a data
 * directory by dataDirNamedHere) may also create its database, as install scripts do before the
 * first start, and says so. `locked`: the caller holds the data directory (lockDataDirectory).
 */
async function openDataDirDatabase(config: Config, { setUp = false, locked = false }: { setUp?: boolean; locked?: boolean } = {}): Promise<SqliteDatabase> {
  if (!setUp) requireDatabase(config.dataDir);
  const creating = setUp && !databaseExists(config.dataDir);
  const db = openDatabase(databasePath(config.dataDir), config.synchronous);
  // Said once the file is there: a directory that cannot hold it is refused without this line.
  if (creating) process.stderr.write(`created a new database at ${resolve(databaseFile(config.dataDir))}; serve it with --data-dir ${resolve(config.dataDir)}\n`);
  const migrated = await migrateDataDirectory(db, config, { locked }).catch(async (error: unknown) => {
    await db.close();
    throw error;
  });
  // A database just created got its whole schema, which the line above says.
  if (!creating) noteApplied(migrated.applied);
  return migrated.db;
}

/** noteApplied names on stderr the migrations a command other than migrate applied before its work, as migrate says them: an upgrade's schema change is not made unseen. */
function noteApplied(applied: string[]): void {
  if (applied.length > 0) process.stderr.write(`crm: applied ${applied.join(", ")}\n`);
}

/**
 * openConfiguredDatabase opens and migrates the configured database: PostgreSQL with --database-url
 * (migrated like serve does, so a command run before the first start finds the schema), else the
 * data directory's SQLite (openDataDirDatabase, with its options). It takes the command's one
 * Config: a --config read again (a pipe, `--config <(envsubst ...)`) is empty the second time.
 */
async function openConfiguredDatabase(config: Config, options: { setUp?: boolean; locked?: boolean } = {}): Promise<Backend> {
  if (!config.databaseUrl) return openDataDirDatabase(config, options);
  const db = await openBackend(config);
  noteApplied(await migrateWithSecretsKey(db, config));
  return db;
}

/** RESET_FLAG confirms a secrets key reset; without it the reset lists what it would change. */
const RESET_FLAG = "--yes-disable-every-subscription";
const SECRETS_KEY_USAGE = `usage: secrets-key rotate --new-key-file FILE (a key others may have read) | secrets-key reset [${RESET_FLAG}] (only when the database's secrets key is lost; without the flag it lists what it would change)`;

/** plural counts `n` things, named `one` or `many`. */
const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/** resetLines lists the subscriptions of a secrets key reset, one line each as they were before it: id, status, target URL, events, pending deliveries, description. */
function resetLines(subscriptions: ResetSubscription[]): string {
  // A description comes from the API as given, and may hold control characters a terminal would act on.
  return subscriptions.map((s) => `${s.id}  ${s.status}  ${s.target_url}  ${s.events.join(",")}  ${s.pending} pending${s.description === null ? "" : `  ${printable(s.description)}`}\n`).join("");
}

type SecretsKey = ReturnType<typeof loadSecretsKey>;

/**
 * resetWithKey runs the reset with the key the next start reads: `given`, else the data directory's
 * secrets.key, created here to seal the new secrets with. A key created for a reset that refuses or
 * fails is removed: no database records it, and it would pass for the lost one's replacement. Once
 * the reset has committed the key stays, whatever happens next: the database records it. Then it
 * fails the pending deliveries; `unsent` is the refusal that stopped that (the reset stands), or null.
 */
async function resetWithKey(db: Backend, config: Config, given: SecretsKey | null): Promise<{ outcome: ResetSubscription[] | NothingLost; key: SecretsKey; unsent: unknown }> {
  const key = given ?? loadSecretsKey(config);
  let outcome: ResetSubscription[] | NothingLost;
  try {
    outcome = await resetSecretsKey(db, new SecretBox(key.key));
  } catch (error) {
    if (key.created) rmSync(key.path, { force: true });
    throw error;
  }
  if (typeof outcome === "string") {
    if (key.created) rmSync(key.path, { force: true });
    return { outcome, key, unsent: null };
  }
  if (key.created) noteCreatedSecretsKey(key.path);
  const unsent = await failResetDeliveries(db, outcome, BATCH_ROWS).then(() => null, (error: unknown) => error);
  return { outcome, key, unsent };
}

/** refusalLine is a refused write's error in one line; after earlier writes of the same change (PartlyDone), saying what they did. */
function refusalLine(error: unknown): string {
  const line = (cause: unknown) => String((cause as Error | null)?.message ?? cause).split("\n")[0]!;
  return error instanceof PartlyDone ? `${line(error.cause)}, after ${error.done}` : line(error);
}

/**
 * secretsKeyResetCommand runs `secrets-key reset`: a database whose secrets key is lost refuses
 * every start, so nothing serving it can replace the subscriptions' secrets; this gives each a new
 * one under the key the next start reads, and disables it until its secret is rotated
 * (resetSecretsKey), while nothing serves the database. Without RESET_FLAG it lists the
 * subscriptions it would change and changes nothing.
 */
async function secretsKeyResetCommand(args: string[]): Promise<number> {
  if (args.shift() !== "reset") throw new ConfigError(SECRETS_KEY_USAGE);
  // The flag's name from when the reset deleted every subscription: a script written with it still confirms.
  const confirmed = [takeFlag(args, RESET_FLAG), takeFlag(args, "--yes-delete-every-subscription")].includes(true);
  const config = commandSettings(args);
  noteSettingsWarnings(config);
  if (config.secretsKeyFile && !secretsKeyExists(config)) {
    // For a reset a missing file is the expected case: the lost key's path, where the new key goes.
    throw new ConfigError(
      `secrets key file ${config.secretsKeyFile} (--secrets-key-file, CRM_SECRETS_KEY_FILE) does not exist: the reset seals the subscriptions' new secrets with the key there; ` +
        `make a new key first, (umask 077; head -c 32 /dev/urandom | base64 > ${config.secretsKeyFile}), then run the reset again${config.databaseUrl ? " and give that file to every instance" : ""}`,
    );
  }
  // The listing needs no key; the reset on PostgreSQL a named one (loadSecretsKey says so), on SQLite the data directory's, made when missing (resetWithKey).
  const given = config.secretsKeyFile || (config.databaseUrl ? confirmed : secretsKeyExists(config)) ? loadSecretsKey(config) : null;
  const run = async () => {
    const db = await openConfiguredDatabase(config, { locked: true });
    try {
      return confirmed ? await resetWithKey(db, config, given) : { outcome: await previewSecretsKeyReset(db, given && new SecretBox(given.key)), key: given, unsent: null };
    } finally {
      await db.close();
    }
  };
  if (!config.databaseUrl) requireDatabase(config.dataDir);
  const { outcome, key, unsent } = config.databaseUrl ? await run() : await whileHoldingDataDirectory(config, "stop it first: the reset disables the subscriptions it serves", run);
  if (typeof outcome === "string") {
    throw new ConfigError(
      outcome === "own-key" && key
        ? `secrets key file ${key.path} is the key this database was used with: nothing is lost, and a reset would only disable every webhook subscription; nothing was changed`
        : "this database records no secrets key and holds no signing secret: any key opens it, and a reset would only disable every webhook subscription; nothing was changed",
    );
  }
  const pending = plural(outcome.reduce((sum, s) => sum + s.pending, 0), "pending delivery", "pending deliveries");
  if (!confirmed) {
    printOut(resetLines(outcome));
    throw new ConfigError(
      `secrets-key reset changes nothing without ${RESET_FLAG}; with it, ${outcome.length === 1 ? "the webhook subscription listed" : `each of the ${outcome.length} webhook subscriptions listed`} (id, status, target URL, events, pending deliveries, description) ` +
        `gets a new signing secret in place of the one sealed with the lost key and is disabled until its secret is rotated, and ${pending} end failed, to be recovered once it is enabled`,
    );
  }
  printOut(
    `disabled ${plural(outcome.length, "webhook subscription", "webhook subscriptions")}, each with a new signing secret no receiver knows (${pending} ${unsent === null ? "failed unsent" : "to end failed unsent: not all yet, see below"}); the database now records the secrets key ${key!.path} as its own` +
      (outcome.length === 0 ? "\n" : `; as they were:\n${resetLines(outcome)}for each: rotate its secret (POST /public/v1/webhook-subscriptions/ID/rotate-secret, or Rotate on the console's Subscriptions page), give the new secret to its receiver, enable it (POST .../enable), then send its failed deliveries again under their webhook-ids (POST .../recover)\n`),
  );
  // Done all the same: the database is as the reset leaves it, and nothing sends the deliveries left (each subscription is disabled).
  if (unsent !== null) {
    process.stderr.write(
      `crm: warning: the reset is done, but failing its pending deliveries was refused (${refusalLine(unsent)}); those left stay pending, and none is sent: the service fails them when it starts, and every minute while it runs\n`,
    );
  }
  return EXIT.done;
}

/** newKeyCommand is the shell command that makes a new secrets key in `file`, readable by its owner only. */
const newKeyCommand = (file: string) => `(umask 077; head -c 32 /dev/urandom | base64 > ${file})`;

/**
 * loadNewSecretsKey reads the key `secrets-key rotate` is to seal with: it must exist, be its
 * owner's alone (a key others may have read is no better than the one it replaces) and differ
 * from the current one.
 */
function loadNewSecretsKey(config: Config, file: string, current: SecretsKey): SecretsKey {
  const given = { secretsKeyFile: file, dataDir: config.dataDir };
  if (!secretsKeyExists(given)) throw new ConfigError(`secrets-key rotate: the new key file ${file} does not exist; make a new key with ${newKeyCommand(file)} and run the command again`);
  const next = loadSecretsKey(given);
  if (next.openTo) {
    const mode = (statSync(file).mode & 0o777).toString(8);
    throw new ConfigError(`secrets-key rotate: the new key file ${file} is open to other users (mode 0${mode}): a key others may read is no better than the one it replaces; make it the owner's alone (chmod 600 ${file}) and run the command again; nothing was changed`);
  }
  if (sameBytes(next.key, current.key)) throw new ConfigError(`secrets-key rotate: ${file} holds the same key as ${current.path}, the one to replace; make a new key with ${newKeyCommand(file)}; nothing was changed`);
  return next;
}

/**
 * secretsKeyRotateCommand runs `secrets-key rotate --new-key-file FILE`, for a key others may have
 * read: in one transaction it seals every secret the database holds anew with the key in FILE and
 * records that key as the database's (rotateSecretsKey), so what is sealed opens only with it from
 * then on; killed before that commits, the old key still opens everything. On SQLite it holds the
 * data directory (no serve runs) and then rebuilds the database file, so that no free page or WAL
 * frame keeps a secret sealed with the old key, or one a crm before migration 0011 kept in clear.
 * Every instance is then started with FILE: one still given the old key refuses to start, and one
 * left running (PostgreSQL) refuses to seal with it (sealInWrite). Run again after the commit, it
 * finds FILE the database's key already and only says what is left to do.
 */
async function secretsKeyRotateCommand(args: string[]): Promise<number> {
  args.shift();
  const file = takeOption(args, "--new-key-file");
  if (file === undefined) throw new ConfigError(`secrets-key rotate needs --new-key-file FILE, a new key made with ${newKeyCommand("FILE")}`);
  const config = loadCommandConfig(args);
  if (!config.databaseUrl) requireDatabase(config.dataDir);
  // The key serve reads; a missing one is lost (secrets-key reset), not made here.
  if (!config.databaseUrl && !secretsKeyExists(config)) throw new ConfigError(`there is no secrets key at ${secretsKeyPath(config)} to replace; if the database's key is lost, see secrets-key reset`);
  const current = loadSecretsKey(config);
  // The key in use named as the new one: a rotation's rebuild refused (a reader, a full disk) and its
  // key then moved into place, as README's recipe does right after the command, is run again so. It
  // rebuilds the file only; refused as "the same key", its advice to make a new key there would
  // overwrite the database's key.
  const inUse = resolve(file) === resolve(current.path);
  const next = inUse ? current : loadNewSecretsKey(config, file, current);
  let rebuildFailed: unknown = null;
  const run = async () => {
    const db = await openConfiguredDatabase(config, { locked: true });
    try {
      const outcome = inUse
        ? await db.write(async (tx) => (isDatabaseSecretsKey(await findStoredKey(tx), new SecretBox(current.key)) ? "in-use" : "not-own-key"))
        : await rotateSecretsKey(db, new SecretBox(current.key), new SecretBox(next.key));
      // Also when run again after a rotation that committed and was stopped before the rebuild.
      // Refused (a full disk, a reader), the rotation stays done: told apart from a rotation that failed.
      if (outcome !== "not-own-key" && db.dialect === "sqlite") {
        try {
          db.waitingForLocks(vacuumInPlace);
        } catch (error) {
          rebuildFailed = error;
        }
      }
      return outcome;
    } finally {
      await db.close();
    }
  };
  const outcome = config.databaseUrl ? await run() : await whileHoldingDataDirectory(config, "stop it first: it would go on sealing with the old key", run);
  if (outcome === "not-own-key") {
    throw new ConfigError(`secrets key file ${current.path} is not the key this database was used with, and the rotation needs that key to open its secrets; nothing was changed (a key that is lost: see secrets-key reset)`);
  }
  const rebuilt = config.databaseUrl || rebuildFailed !== null ? "" : "; the database file was rebuilt, so its free space keeps nothing the old key sealed";
  if (outcome === "in-use") {
    printOut(`${file} is the secrets key in use, the database's: nothing was sealed anew${rebuilt}\n`);
    warnRebuildRefused(rebuildFailed, current.path);
    return EXIT.done;
  }
  printOut(
    outcome === "already-rotated"
      ? `the database already records ${next.path} as its secrets key (a rotation committed before): nothing was sealed anew${rebuilt}
`
      : `sealed anew with ${next.path} the signing secrets of ${plural(outcome.subscriptions, "webhook subscription", "webhook subscriptions")} (with ${plural(outcome.previous, "previous secret", "previous secrets")} of a rotation) ` +
          `and the secrets in ${plural(outcome.answers, "kept answer", "kept answers")} of creates and rotations; the database now records it as its secrets key, and refuses ${current.path}${rebuilt}
`,
  );
  const start = config.secretsKeyFile ? `give ${next.path} to every instance in place of ${current.path} (--secrets-key-file, CRM_SECRETS_KEY_FILE) and start them` : `mv ${next.path} ${current.path}, then start the service`;
  printOut(`next: ${start}; receivers need no change. Backups taken before hold secrets sealed with the old key: keep it with them, apart, or destroy both
`);
  warnRebuildRefused(rebuildFailed, config.secretsKeyFile ? next.path : current.path);
  return EXIT.done;
}

/** warnRebuildRefused warns, when the rebuild after a rotation was refused (`refusal`), that the file may keep what the old key sealed, and how to rebuild it: `inPlace` is where the new key is used from once the next step is done. */
function warnRebuildRefused(refusal: unknown, inPlace: string): void {
  if (refusal === null) return;
  process.stderr.write(
    `crm: warning: the rotation is done, but the database file was not rebuilt (${refusalLine(refusal)}): its free space and log may still hold the secrets sealed with the old key; run the command again once nothing else reads the database and there is room for two copies of its file (one beside it, one in the temporary directory): it rebuilds the file only, given --new-key-file the new key where it is then (once moved as the next step says, ${inPlace})\n`,
  );
}

/**
 * userDeleteCommand runs `user delete ID`: the API's delete, whose contact.updated deliveries a
 * running serve must send. On PostgreSQL the instances are woken for them (or find them at their
 * next poll); on SQLite a serve is woken only by its own commits, so it would send them at its next
 * change: the command is refused while one holds the data directory, and the API is the way then.
 */
async function userDeleteCommand(args: string[]): Promise<number> {
  const id = args.shift();
  if (!id || id.startsWith("-")) throw new ConfigError("user delete needs the user id (see user list)");
  const config = loadCommandConfig(args);
  const remove = async () => {
    const db = await openConfiguredDatabase(config, { locked: true });
    try {
      await db.changeClock.seedBeforeWrites(db);
      const deleted = await deleteUser(db, id, UNLINK_CHUNK, commandOrigin("user delete"));
      // A lost wake-up only leaves the deliveries to the instances' next poll.
      await db.notify(DELIVERY_CHANNEL).catch(() => undefined);
      return deleted;
    } finally {
      await db.close();
    }
  };
  if (!config.databaseUrl) requireDatabase(config.dataDir);
  const why = `delete the user through it (DELETE /public/v1/users/${id}, or Delete on the console's Users page), which sends its contacts' contact.updated at once, or stop it first`;
  // Refused after its first write, it ends in main's PartlyDone line: what stays done, and that running it again finishes it.
  const { user, unassigned } = await (config.databaseUrl ? remove() : whileHoldingDataDirectory(config, why, remove));
  printOut(`deleted user ${user.id} (${user.email}); contacts that lost the assignment: ${unassigned} (each sends contact.updated)\n`);
  return EXIT.done;
}

/**
 * operatorRemoveCommand runs `operator remove --email E [--revoke-tokens] [--disable-subscriptions]`:
 * the console's removal with its two boxes (removeOperatorByEmail), then says what it revoked and
 * disabled and what the operator made that stays. A disable records subscription.disabled events
 * a running serve must send: on SQLite a serve is woken only by its own commits, so the command
 * with --disable-subscriptions is refused while one holds the data directory (as `user delete`
 * is); on PostgreSQL the instances are woken.
 */
async function operatorRemoveCommand(args: string[]): Promise<number> {
  const email = takeOption(args, "--email");
  const choices = { revokeTokens: takeFlag(args, "--revoke-tokens"), disableSubscriptions: takeFlag(args, "--disable-subscriptions") };
  if (!email) throw new ConfigError("operator remove needs --email E");
  const config = loadCommandConfig(args);
  const remove = async () => {
    const db = await openConfiguredDatabase(config, { locked: !config.databaseUrl && choices.disableSubscriptions });
    try {
      const removed = await removeOperatorByEmail(db, email, choices, BATCH_ROWS);
      // A lost wake-up only leaves the subscription.disabled deliveries to the instances' next poll.
      if (removed.removal.subscriptions_disabled.length > 0) await db.notify(DELIVERY_CHANNEL).catch(() => undefined);
      return removed;
    } finally {
      await db.close();
    }
  };
  if (!config.databaseUrl) requireDatabase(config.dataDir);
  const why = 'remove them on the console with "Also disable their active subscriptions" ticked, which sends subscription.disabled at once, or stop it first';
  const { removal, made, unsent } = config.databaseUrl || !choices.disableSubscriptions ? await remove() : await whileHoldingDataDirectory(config, why, remove);
  printOut(removalText(removal, made));
  // Done all the same: the removal stands, and the service fails what is left (each subscription is disabled).
  if (unsent !== null) {
    process.stderr.write(
      `crm: warning: the removal is done, but failing the disabled subscriptions' pending deliveries was refused (${refusalLine(unsent)}); those left stay pending, and none is sent: the service fails them when it starts, and every minute while it runs\n`,
    );
  }
  return EXIT.done;
}

/**
 * removalText says what `operator remove` did and what the operator made that stays, listed as
 * the console's confirmation lists it: their active API tokens (id, start, name, created, last
 * used) and the subscriptions they made or created with one of those (id, status, target URL,
 * description, the token). Names and descriptions come as given: escaped (printable).
 */
function removalText(removal: Removal, made: OperatorMade): string {
  const revoked = new Set(removal.tokens_revoked);
  const disabled = new Set(removal.subscriptions_disabled.map((s) => s.id));
  const tokenLine = (t: ApiTokenInfo) => `  ${t.id}  ${t.prefix}…  ${printable(t.name)}  created ${t.created_at}  last used ${t.last_used_at ?? "never"}\n`;
  const subscriptionLine = ({ subscription: s, via }: OperatorMade["subscriptions"][number]) =>
    `  ${s.id}  ${disabled.has(s.id) ? "disabled" : s.status}  ${s.target_url}${s.description === null ? "" : `  ${printable(s.description)}`}${via ? `  created with their API token ${printable(via.name)} (${via.prefix}…)` : ""}\n`;
  /** listed is a heading with its lines, or nothing without lines: `heading(n, it)` says n of them, "it" or "them". */
  const listed = <T,>(items: T[], line: (item: T) => string, heading: (n: number, it: string, one: boolean) => string) =>
    items.length === 0 ? "" : `${heading(items.length, items.length === 1 ? "it" : "them", items.length === 1)}:\n${items.map(line).join("")}`;
  const madeWith = "they made, or created with one of their API tokens";
  const tokens =
    made.tokens.length === 0
      ? "they made no API token still active\n"
      : listed(made.tokens.filter((t) => revoked.has(t.id)), tokenLine, (n, it) => `revoked ${plural(n, "API token", "API tokens")} they made (requests with ${it} get 401)`) +
        listed(made.tokens.filter((t) => !revoked.has(t.id)), tokenLine, (n, it, one) => `${plural(n, "API token", "API tokens")} they made ${one ? "stays" : "stay"} active (revoke ${it} with crm token revoke ID)`);
  const subscriptions =
    made.subscriptions.length === 0
      ? "they made no subscription, themselves or with one of their API tokens\n"
      : listed(made.subscriptions.filter(({ subscription }) => disabled.has(subscription.id)), subscriptionLine, (n) =>
          `disabled ${plural(n, "subscription", "subscriptions")} ${madeWith} (nothing more is sent to them and their pending deliveries end failed; Enable on the console's Subscriptions page, or POST .../enable, brings one back)`,
        ) +
        listed(made.subscriptions.filter(({ subscription }) => !disabled.has(subscription.id)), subscriptionLine, (n, it, one) =>
          `${plural(n, "subscription", "subscriptions")} ${madeWith}, ${one ? "stays as it is" : "stay as they are"} (pause, disable or delete ${it} on the console's Subscriptions page or with the API)`,
        );
  return `removed operator ${removal.operator.id} (${removal.operator.email}); their sessions have ended, and the links they made no longer work\n${tokens}${subscriptions}`;
}

/**
 * operatorForgetCommand runs `operator forget --email E` (forgetOperatorEmail) and says how many
 * rows of each place it changed, or, for a current operator, refuses: they must be removed first.
 * It queues nothing for the delivery loop, so it works beside a running serve on SQLite too.
 */
async function operatorForgetCommand(args: string[]): Promise<number> {
  const email = takeOption(args, "--email");
  if (!email) throw new ConfigError("operator forget needs --email E");
  const db = await openConfiguredDatabase(loadCommandConfig(args));
  try {
    const forgetting = await forgetOperatorEmail(db, email);
    if ("current" in forgetting) {
      const { id, email: theirs } = forgetting.current;
      process.stderr.write(`crm: ${theirs} is a current operator (${id}): remove them first (crm operator remove --email ${theirs}); nothing was changed\n`);
      return EXIT.refused;
    }
    const counts = Object.entries(forgetting.replaced);
    if (counts.every(([, count]) => count === 0)) {
      printOut(`nothing kept ${printable(forgetting.email)}: no record names it, so there was nothing to forget\n`);
      return EXIT.done;
    }
    printOut(`forgot ${forgetting.email}, a removed operator's email: where it was kept, each record now says "${MADE_BY_WORDS.anOperator} ${MADE_BY_WORDS.forgotten}":\n${counts.map(([column, count]) => `  ${column}: ${count}\n`).join("")}`);
  } finally {
    await db.close();
  }
  return EXIT.done;
}

/**
 * eraseCommand runs `contact erase ID` and `account erase ID`: the API's erasure of a deleted
 * record's earlier events (eraseDeletedRecord). It queues nothing for the delivery loop, so unlike
 * `user delete` it works beside a running serve on SQLite too.
 */
async function eraseCommand(resource: ErasableResource, args: string[]): Promise<number> {
  if (args.shift() !== "erase") throw new ConfigError(`usage: ${resource} erase ID`);
  const id = args.shift();
  if (!id || id.startsWith("-")) throw new ConfigError(`${resource} erase needs the id of a deleted ${resource} (see GET /public/v1/${resource}s/deleted)`);
  const db = await openConfiguredDatabase(loadCommandConfig(args));
  try {
    const { data } = (await eraseDeletedRecord(db, resource, id, BATCH_ROWS, null, commandOrigin(`${resource} erase`).madeBy)).body;
    printOut(`erased the payloads of ${plural(data.events_erased, "earlier event", "earlier events")} of ${resource} ${id}; ${plural(data.deliveries_failed, "pending delivery", "pending deliveries")} of them failed unsent\n`);
  } finally {
    await db.close();
  }
  return EXIT.done;
}

const IMPORT_USAGE = 'usage: import contacts FILE.csv|FILE.jsonl --url URL --token-file FILE [--map "Column=field,..."] [--trial] [--dry-run] [--invalid-file PATH] [--allow-plain-http]';

/** PLAIN_HTTP_FLAG lets the importer send its token over plain http to another machine, which it otherwise refuses. */
const PLAIN_HTTP_FLAG = "--allow-plain-http";

/**
 * readTokenFile reads the importer's token file. One it may not read, or not look at (behind a
 * directory it may not enter), is named so, not called missing.
 */
function readTokenFile(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(isAbsent(error) ? `import: no token file ${path}` : `import: cannot read the token file ${path}: ${fileErrorText(error, "run the import as a user who may read it")}`);
  }
}

/** importCommand runs `import contacts`: the binary as a client of any server's API. */
async function importCommand(args: string[]): Promise<number> {
  if (args.shift() !== "contacts") throw new ConfigError(IMPORT_USAGE);
  const url = takeOption(args, "--url");
  const tokenFile = takeOption(args, "--token-file");
  const map = takeOption(args, "--map");
  const invalidFile = takeOption(args, "--invalid-file");
  const trial = takeFlag(args, "--trial");
  const dryRun = takeFlag(args, "--dry-run");
  const plainHttp = takeFlag(args, PLAIN_HTTP_FLAG);
  // The log level, as every command takes it; no other setting is the importer's (an API client).
  const logLevel = takeOption(args, "--log-level");
  const configFile = takeOption(args, "--config");
  commandSettings([...(logLevel === undefined ? [] : [`--log-level=${logLevel}`]), ...(configFile === undefined ? [] : [`--config=${configFile}`])], new Set(["logLevel"]));
  const file = args.shift();
  if (!file || file.startsWith("-") || args.length > 0) throw new ConfigError(args.length > 0 ? `import: unexpected ${args.join(" ")} (${IMPORT_USAGE})` : IMPORT_USAGE);
  let input: Stats | undefined;
  try {
    input = statIfThere(file);
  } catch (error) {
    throw new ConfigError(`import: cannot read ${file}: ${fileErrorText(error, "run the import as a user who may read it")}`);
  }
  if (!input) throw new ConfigError(`import: no file ${file}`);
  if (input.isDirectory()) throw new ConfigError(`import: ${file} is a directory, not a .csv or .jsonl file`);
  // The file is read more than once (checked whole, then its accounts, then its contacts), never all held in memory.
  if (!input.isFile()) throw new ConfigError(`import: ${file} is not a regular file (a pipe or a device); the importer reads its file more than once: save it to a file first`);
  let api: { url: string; token: string } | undefined;
  if (!dryRun) {
    if (!url || !tokenFile) throw new ConfigError(`import needs --url and --token-file (or --dry-run); ${IMPORT_USAGE}`);
    if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) throw new ConfigError(`import: --url ${JSON.stringify(url)} is not an http(s) URL`);
    // Every request carries the token, with full rights over contacts and webhooks; on this machine http crosses no network.
    const { protocol, host } = new URL(url);
    if (protocol === "http:" && !isLoopbackHost(host) && !plainHttp) {
      throw new ConfigError(`import: --url ${printable(`http://${host}`)} is plain http to another machine: every request would carry the API token across the network unencrypted; use https://, or pass ${PLAIN_HTTP_FLAG} on a network you trust with it`);
    }
    const token = readTokenFile(tokenFile).trim();
    if (token === "") throw new ConfigError(`import: the token file ${tokenFile} is empty`);
    // fetch would refuse the Authorization header only when sending, after every retry.
    if (/\s/.test(token)) throw new ConfigError(`import: the token file ${tokenFile} must hold one API token on one line`);
    api = { url: url.replace(/\/+$/, ""), token };
  }
  try {
    const summary = await importContacts({ file, api, map, trial, dryRun, invalidFile, progress: process.stderr });
    const counts = dryRun ? `valid ${summary.valid}, invalid ${summary.invalid}` : importCounts(summary);
    const skipped = summary.skipped > 0 ? `; skipped ${summary.skipped === 1 ? "1 row" : `${summary.skipped} rows`} of empty cells` : "";
    printOut(`${dryRun ? "dry run, nothing sent" : trial ? "trial, one row sent" : "imported"}: ${summary.rows} rows: ${counts}${skipped}\n`);
    if (summary.invalidFile) printOut(`invalid rows with their errors: ${summary.invalidFile}\n`);
    if (summary.invalidFileError) {
      process.stderr.write(`crm: ${summary.invalidFileError}\n`);
      return EXIT.refused;
    }
    return summary.invalid > 0 ? EXIT.notDone : EXIT.done;
  } catch (error) {
    if (!(error instanceof ImportError)) throw error;
    // The message may quote the server's answer: a refused item's pointer names the file's custom-field keys.
    process.stderr.write(`crm: import stopped: ${printable(error.message)}\n${error.resumable ? "run the same command again to resume: batches already sent are not applied twice\n" : ""}`);
    return EXIT.refused;
  }
}

async function main(argv: string[]): Promise<number> {
  const args = commandFirst(argv);
  if (asksFor(args, ["--help", "-h"]) || args[0] === "help") {
    printOut(args[0] === "copy-to-postgres" ? COPY_USAGE : HELP);
    return EXIT.done;
  }
  if (asksFor(args, ["--version"]) || args[0] === "version") {
    printOut(`crm ${BUILD}\n`);
    return EXIT.done;
  }
  const command = args[0] && !args[0].startsWith("-") ? args.shift()! : "serve";
  switch (command) {
    case "serve": {
      const config = loadCommandConfig(args, { serving: true });
      checkFetchLimit(process.env.BUN_CONFIG_MAX_HTTP_REQUESTS);
      const running = await startServer(config);
      const unknownEnvironment = unknownEnvironmentText(process.env);
      if (unknownEnvironment) running.runtime.log.warn(unknownEnvironment);
      flushLogs();
      let stopping = false;
      const shutdown = (signal: NodeJS.Signals) => {
        // A second signal means "now": every acknowledged write is already committed, so exiting loses nothing.
        if (stopping) process.exit(128 + constants.signals[signal]);
        stopping = true;
        running.runtime.log.info("shutting down", { signal, deadline_ms: config.shutdownTimeoutMs, drain_ms: config.shutdownDrainMs });
        running.stop({ drain: true }).then(
          () => process.exit(0),
          (error: unknown) => {
            running.runtime.log.error("shutdown failed", { error: String(error) });
            process.exit(1);
          },
        );
      };
      process.on("SIGTERM", shutdown);
      process.on("SIGINT", shutdown);
      // Said once the signals are handled: a supervisor that stops the service as soon as it reads
      // this line gets the graceful stop, not a process killed by the signal (exit 143).
      process.stdout.write(`listening on ${running.url}\n`);
      return new Promise<number>(() => {});
    }
    case "migrate": {
      const config = loadCommandConfig(args);
      // Not in a data_dir only the --config file names, as token create does not (dataDirNamedHere): on several
      // instances without the URL that made a database whose tokens every instance refused. The default ./data
      // still, as a first run from the repository makes it.
      if (!config.databaseUrl && !dataDirNamedHere(args) && config.dataDir !== DEFAULT_CONFIG.dataDir) requireDatabase(config.dataDir);
      const opened = await openBackend(config);
      let db: Backend = opened;
      try {
        let applied: string[];
        if (opened.dialect === "sqlite") ({ db, applied } = await migrateDataDirectory(opened, config));
        else applied = await migrateWithSecretsKey(opened, config);
        printOut(applied.length ? `applied ${applied.join(", ")}\n` : "database is up to date\n");
      } finally {
        await db.close();
      }
      return EXIT.done;
    }
    case "token": {
      const sub = args.shift();
      if (sub === "create") {
        const name = takeOption(args, "--name");
        const json = takeFlag(args, "--json");
        const rateText = takeOption(args, "--rate");
        if (name === undefined) throw new ConfigError("token create needs --name NAME (1 to 100 characters)");
        const nameFault = checkTokenName(name);
        if (nameFault) throw new ConfigError(`token create --name ${nameFault}`);
        const rate = rateText === undefined ? null : parseTokenRate(rateText);
        if (rate === null && rateText !== undefined) {
          throw new ConfigError(`invalid --rate: ${JSON.stringify(rateText)} is not READS[:BURST],WRITES[:BURST] in requests per second, each rate and burst at most ${MAX_TOKEN_RATE.toLocaleString("en-US")}, e.g. 100:200,50:100`);
        }
        const config = loadCommandConfig(args);
        if (stdoutDiscarded()) throw new ConfigError("token create: standard output is /dev/null (or closed), so the token would be shown to no one; nothing was created");
        const db = await openConfiguredDatabase(config, { setUp: dataDirNamedHere(args) });
        const { token, info } = await createApiToken(db, name.trim(), Date.now(), rate, { kind: "command_line" });
        // A name refuses control characters but not bidirectional ones, which would draw the rest of a line backwards: escaped
        // (in the JSON too, where \u202e is the same string).
        try {
          printOut(json ? `${printable(JSON.stringify({ ...info, ...(rate ? { rate: { read_per_second: rate.readPerSecond, read_burst: rate.readBurst, write_per_second: rate.writePerSecond, write_burst: rate.writeBurst } } : {}), token }))}\n` : `${token}\n`);
        } catch (error) {
          if (!(error instanceof OutputFailed)) throw error;
          // Its only copy is lost: left live, it would be a valid token no one holds or can name by its value.
          await revokeApiToken(db, info.id);
          throw new OutputFailed(`${error.message}: the token just made, ${info.id} (${printable(info.name)}), is revoked; nothing was lost, create another`);
        }
        if (!json) process.stderr.write(`created token ${info.id} (${printable(info.name)}); it is shown only this once\n`);
        return EXIT.done;
      }
      if (sub === "list") {
        const db = await openConfiguredDatabase(loadCommandConfig(args));
        const names = await makerNames(db);
        for (const t of await listTokens(db)) {
          const rate = await tokenRate(db, t.id);
          const rateText = rate ? `  rate ${rate.readPerSecond}:${rate.readBurst},${rate.writePerSecond}:${rate.writeBurst}` : "";
          const madeBy = printable(madeByText(t.made_by, names));
          printOut(`${t.id}  ${t.prefix}…  ${printable(t.name)}  created ${t.created_at}  last used ${t.last_used_at ?? "never"}  made by ${madeBy}${rateText}${t.revoked_at ? `  revoked ${t.revoked_at}` : ""}\n`);
        }
        return EXIT.done;
      }
      if (sub === "revoke") {
        const id = args.shift();
        if (!id || id.startsWith("-")) throw new ConfigError("token revoke needs the token id (see token list)");
        const db = await openConfiguredDatabase(loadCommandConfig(args));
        if (!(await revokeApiToken(db, id))) {
          process.stderr.write((await findToken(db, id)) ? `crm: token ${id} is already revoked\n` : `crm: no token with id ${id}\n`);
          return EXIT.notDone;
        }
        printOut(`revoked ${id}\n`);
        return EXIT.done;
      }
      throw new ConfigError("usage: token create --name N [--json] [--rate R[:B],W[:B]] | token list | token revoke ID");
    }
    case "user": {
      const sub = args.shift();
      if (sub === "list") {
        const db = await openConfiguredDatabase(loadCommandConfig(args));
        // A name comes from the API as given, and may hold control characters a terminal would act on.
        for (const user of await allUsers(db)) printOut(`${user.id}  ${user.email}  ${printable(user.name)}  created ${user.created_at}\n`);
        return EXIT.done;
      }
      if (sub === "delete") return userDeleteCommand(args);
      if (sub !== "create") throw new ConfigError("usage: user create --name N --email E | user list | user delete ID");
      const name = takeOption(args, "--name");
      const email = takeOption(args, "--email");
      // An empty value is the service's to refuse, in the words the API uses for it.
      if (name === undefined || email === undefined) throw new ConfigError("user create needs --name and --email");
      const db = await openConfiguredDatabase(loadCommandConfig(args), { setUp: dataDirNamedHere(args) });
      await db.changeClock.seedBeforeWrites(db);
      const user = await db.write(async (tx) => createUser(tx, { name, email }, await db.changeClock.stamp(tx)));
      printOut(`${printable(JSON.stringify(user))}\n`);
      return EXIT.done;
    }
    case "contact":
    case "account":
      return eraseCommand(command, args);
    case "operator": {
      const sub = args.shift();
      if (sub === "list") {
        const db = await openConfiguredDatabase(loadCommandConfig(args));
        for (const operator of await operatorSummaries(db)) {
          printOut(`${operator.id}  ${operator.email}  created ${operator.created_at}  last seen ${operator.last_seen_at ?? "never"}\n`);
        }
        return EXIT.done;
      }
      if (sub === "remove") return operatorRemoveCommand(args);
      if (sub === "forget") return operatorForgetCommand(args);
      if (sub === "unlock") {
        const email = takeOption(args, "--email");
        if (!email) throw new ConfigError(`operator ${sub} needs --email E`);
        const config = loadCommandConfig(args);
        const db = await openConfiguredDatabase(config);
        const cleared = await unlockOperator(db, await databaseSecrets(db, config), email);
        printOut(`cleared ${cleared} failed sign-in record${cleared === 1 ? "" : "s"} of ${email.trim().toLowerCase()}\n`);
        return EXIT.done;
      }
      if (sub !== "create" && sub !== "reset-password") throw new ConfigError(OPERATOR_USAGE);
      const email = takeOption(args, "--email");
      // Never a password argument: it would show in the process list and the shell history.
      if (!email || !takeFlag(args, "--password-stdin")) throw new ConfigError(`operator ${sub} needs --email E and --password-stdin (the password is read from standard input)`);
      const password = await readPasswordInput();
      if (sub === "reset-password") {
        const config = loadCommandConfig(args);
        const db = await openConfiguredDatabase(config);
        const operator = await resetOperatorPassword(db, await databaseSecrets(db, config), email, password);
        printOut(`set a new password for operator ${operator.id} (${operator.email}); their sessions have ended\n`);
        return EXIT.done;
      }
      const db = await openConfiguredDatabase(loadCommandConfig(args), { setUp: dataDirNamedHere(args) });
      const operator = await createOperator(db, { email, password });
      printOut(`created operator ${operator.id} (${operator.email}); sign in at /console/login\n`);
      return EXIT.done;
    }
    case "backup": {
      const file = args.shift();
      if (!file || file.startsWith("-")) throw new ConfigError("usage: backup FILE [--data-dir DIR] (FILE must not exist yet)");
      const config = loadCommandConfig(args);
      if (config.databaseUrl) {
        // Never the password: an example run as shown would put it in argv, which ps shows to every local user.
        process.stderr.write(
          `crm: backup copies the SQLite database of a data directory, and this one is on PostgreSQL (the database URL given by ${config.databaseUrlFrom.named}): back it up with pg_dump, the password in ~/.pgpass (0600) rather than on the command line, which ps shows to every local user: pg_dump --format=custom --file=FILE ${shellWord(urlWithoutPassword(config.databaseUrl))}; keep the secrets key file apart from the dump\n`,
        );
        return EXIT.refused;
      }
      requireDatabase(config.dataDir);
      try {
        const result = await backupDatabase(config.dataDir, file);
        printOut(`backed up ${result.source} to ${result.file} (${result.bytes} bytes, integrity ok)\n`);
        for (const removed of result.removedPartials) printOut(`removed ${removed}, a partial file left by a crm killed half-way\n`);
        // A data directory never served has no key yet (nothing sealed made one): there is no file to keep.
        printOut(
          secretsKeyExists(config)
            ? `note: the secrets key ${secretsKeyPath(config)} is not in the backup; keep a copy of it apart from the backup: without it the webhook signing secrets in the backup cannot be read\n`
            : `note: there is no secrets key at ${secretsKeyPath(config)} yet: the first start makes it (a database served before has lost it: see secrets-key reset); keep a copy of it apart from the backups once it is there\n`,
        );
        return EXIT.done;
      } catch (error) {
        if (!(error instanceof BackupError)) throw error;
        process.stderr.write(`crm: ${error.message}\n`);
        return EXIT.notDone;
      }
    }
    case "import":
      return importCommand(args);
    case "secrets-key":
      return args[0] === "rotate" ? secretsKeyRotateCommand(args) : secretsKeyResetCommand(args);
    case "copy-to-postgres": {
      const config = loadCommandConfig(args);
      // The source is the data directory's SQLite, sealed with that directory's own key.
      const copy = () => copyToPostgresCommand(config, () => openDataDirDatabase({ ...config, databaseUrl: "" }, { locked: true }));
      // Without a target the command refuses before it opens anything.
      if (!config.databaseUrl) return copy();
      // A change a running serve made after the copy would be missing in PostgreSQL: the copy holds the directory.
      requireDatabase(config.dataDir);
      return whileHoldingDataDirectory(config, "stop it first, so that no change lands after the copy", copy);
    }
    default:
      throw new ConfigError(`unknown command ${command} (see --help)`);
  }
}

/**
 * unavailableText is the one line of a database that is busy or cannot be reached just now (a
 * PostgreSQL server down or restarting, SQLite's write lock held by another process past the
 * wait), for which the command exits EXIT.unavailable: running it again later may succeed. A
 * refusal of what the service was set up with (a login refused, a database missing) is not one.
 */
function unavailableText(error: unknown): string | null {
  const cause = error instanceof ConfigError ? error.cause : error;
  const failure = databaseFailureOf(cause);
  if (failure !== "busy" && (failure !== "unavailable" || databaseFaultOf(cause) !== null)) return null;
  if (error instanceof ConfigError) return error.message;
  if (isSqliteBusy(error)) {
    return `the database is busy: another process has held its write lock for ${WRITE_LOCK_WAIT_MS / 1000} s (a sqlite3 session with a transaction open, a long write); nothing more was done, try again`;
  }
  return `the database is ${failure === "busy" ? "busy" : "unavailable"}: ${String((error as Error)?.message ?? error).split("\n")[0]}; nothing more was done, try again`;
}

/**
 * storageFailureText is the one line of a command the storage refused (a full disk: SQLITE_FULL,
 * PostgreSQL's 53100, ENOSPC writing a file such as the secrets key; a read-only file system:
 * SQLite's refusal, or EROFS met on the data directory; a failed sync to disk), which the API
 * answers 503 to: the command exits EXIT.unavailable, as running it again once the operator has
 * acted may succeed. A migration it stopped is told by its cause and named. Null for any other error.
 */
function storageFailureText(error: unknown): string | null {
  const cause = error instanceof MigrationFailed ? error.cause : error;
  const detail = String((cause as Error)?.message ?? cause).split("\n")[0];
  const stopped = error instanceof MigrationFailed ? `migration ${error.migration} was not applied (those before it were), and nothing more was done` : "nothing more was done";
  const code = errorCode(cause);
  switch (code === "ENOSPC" ? "storage-full" : code === "EROFS" ? "storage-read-only" : databaseFailureOf(cause)) {
    case "storage-full":
      return `no room left on the disk (${detail}); ${stopped}: make room, then run the command again`;
    case "storage-read-only":
      return `the database's storage takes no writes (${detail}): its file or file system is read-only; ${stopped}: make it writable, then run the command again`;
    case "storage-failed":
      return `the database's storage failed (${detail}), so the last change may not have been saved: check the disk, then run the command again`;
    default:
      return null;
  }
}

/** SUBCOMMANDS are the commands whose next word says what they do (token create), named with it when one fails. */
const SUBCOMMANDS: ReadonlySet<string> = new Set(["token", "user", "operator", "contact", "account", "secrets-key", "import"]);

/**
 * unexpectedText is what an error no refusal foresaw prints: one line naming the command and the
 * error, which an operator can act on or report, where the stack's dozen lines of the service's
 * files said nothing more to them; at --log-level debug (stackShown) the stack follows it.
 */
function unexpectedText(error: unknown): string {
  const args = commandFirst(process.argv.slice(2));
  const command = args[0] && !args[0].startsWith("-") ? args[0] : "serve";
  const words = SUBCOMMANDS.has(command) && args[1] && !args[1].startsWith("-") ? `${command} ${args[1]}` : command;
  const line = `crm: ${printable(words)} failed: ${printable(String(error).split("\n")[0]!)}`;
  const stack = error instanceof Error ? error.stack : undefined;
  if (stackShown && stack) return `${line}\n${stack}\n`;
  return `${line} (run it with CRM_LOG_LEVEL=debug to print its stack)\n`;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (refused: unknown) => {
    // A refusal after a change's first write (crm user delete's, crm contact|account erase's): what the writes before it did stays, which the refusal's own
    // line would not tell; each write takes up where the last left off, so the command run again goes on from there.
    if (refused instanceof PartlyDone) process.stderr.write(`crm: ${refused.done} before a later write was refused; that stays done, and the same command run again finishes it\n`);
    const thrown = refused instanceof PartlyDone ? refused.cause : refused;
    const error = readOnlyWriteRefusal(thrown);
    // A write refused by a read-only PostgreSQL is the setting's to mend (readOnlyWriteRefusal), not a moment's.
    const unavailable = error === thrown ? (unavailableText(error) ?? storageFailureText(error)) : null;
    // 128 + SIGPIPE, as the shell reports a command a closed pipe ended.
    if (error instanceof OutputFailed && error.readerGone) process.exit(141);
    if (error instanceof OutputFailed) {
      process.stderr.write(`crm: ${error.message}\n`);
      process.exit(EXIT.notDone);
    }
    if (unavailable !== null) {
      process.stderr.write(`crm: ${unavailable}\n`);
      process.exit(EXIT.unavailable);
    }
    if (error instanceof ConfigError || error instanceof MigrationFailed) process.stderr.write(`crm: ${error.message}\n`);
    else if (error instanceof ProblemError) process.stderr.write(`crm: ${error.message}\n`);
    else process.stderr.write(unexpectedText(error));
    process.exit(EXIT.refused);
  },
);
