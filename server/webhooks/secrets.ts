import type { Database as SqliteConnection } from "bun:sqlite";
import type { Database, Db } from "../db/sql.ts";
import { ProblemError } from "../shared/problem.ts";
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, type Config } from "../config.ts";
import { sameBytes } from "../shared/crypto.ts";
import { createOwnerOnlyFile, fileErrorText, fsyncPath, giveToFolderOwner, notOwnedText, openToOthers, partialName, pathExists, publishFile, removeStalePartials } from "../shared/files.ts";
import { SECRET_PREFIX } from "./delivery.ts";
import { deleteSecretsKeyCheck, findOneSealedSecret, findSecretsKeyCheck, insertSecretsKeyCheck, listUnsealedSecretAnswers, listUnsealedSubscriptionSecrets, updateAnswerSecret, updateSubscriptionSecrets } from "./store.ts";

/** SECRETS_KEY_FILE_NAME is the key file created in the data directory when --secrets-key-file is not given. */
const SECRETS_KEY_FILE_NAME = "secrets.key";
const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** SEALED_PREFIX starts every sealed secret; what follows is `<first 4 characters>.<base64 of iv, ciphertext, tag>`. */
const SEALED_PREFIX = "sealed-v1.";
/** HINT_LENGTH characters of a secret after whsec_ stay readable, the ones the API shows masked. */
const HINT_LENGTH = 4;

/** OPENED_CACHE_SIZE bounds the opened secrets kept in memory. */
const OPENED_CACHE_SIZE = 1000;

/** SecretUnreadable says a sealed secret does not open with this key (another key, or altered). */
export class SecretUnreadable extends Error {}

/**
 * SecretBox seals signing secrets with AES-256-GCM under the secrets key. Each secret is bound to
 * its subscription id (additional data), so a sealed secret copied onto another row does not open.
 * It also signs what the service hands out and must recognise later (the console's device
 * cookies), and seals what it reads back (the console's search addresses, the link codes its forms keep), with a key
 * derived from the secrets key for each purpose: every instance sharing the key makes and accepts
 * the same signatures and sealed texts, and none of them is the sealing key itself.
 */
export class SecretBox {
  /** opened secrets by subscription id and sealed text: opening costs ~4 us, a twentieth of a delivery */
  private readonly opened = new Map<string, string>();
  /** signing and sealing keys by purpose, derived once */
  private readonly derivedKeys = new Map<string, Buffer>();

  constructor(private readonly key: Uint8Array) {}

  /** seal encrypts a whsec_... secret of a subscription for storage. */
  seal(subscriptionId: string, secret: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv).setAAD(Buffer.from(subscriptionId));
    const sealed = Buffer.concat([iv, cipher.update(secret, "utf8"), cipher.final(), cipher.getAuthTag()]);
    return `${SEALED_PREFIX}${hintOf(secret)}.${sealed.toString("base64")}`;
  }

  /** open decrypts a sealed secret of a subscription, or throws SecretUnreadable. */
  open(subscriptionId: string, stored: string): string {
    const cacheKey = `${subscriptionId} ${stored}`;
    let secret = this.opened.get(cacheKey);
    if (secret === undefined) {
      secret = this.decrypt(subscriptionId, stored);
      // Subscriptions are few (MAX_SUBSCRIPTIONS); a rotated secret leaves its old entry behind, so start over now and then.
      if (this.opened.size >= OPENED_CACHE_SIZE) this.opened.clear();
      this.opened.set(cacheKey, secret);
    }
    return secret;
  }

  /** signature is the HMAC-SHA256 of `text` under the key derived (HKDF-SHA256) from the secrets key for `purpose`. */
  signature(purpose: string, text: string): Uint8Array {
    return createHmac("sha256", this.derivedKey(purpose)).update(text).digest();
  }

  /**
   * sealText encrypts `text` (AES-256-GCM) under the key derived from the secrets key for
   * `purpose`, bound to `boundTo` (additional data), as base64url: for an address that must carry
   * what it may not show, or a kept answer that must not hold it in clear. Every instance sharing the key opens it.
   */
  sealText(purpose: string, boundTo: string, text: string): string {
    return this.sealWith(purpose, randomBytes(IV_BYTES), Buffer.from(boundTo), Buffer.from(text));
  }

  /**
   * sealTextAlike is sealText with the nonce derived from what it seals (an HMAC of the binding and
   * the text under a key of its own), not drawn: the same text bound alike seals to the same string
   * each time, so an answer carrying it reads the same whenever its data does (a list's cursor),
   * and a nonce comes again only with what it sealed. openText opens it.
   */
  sealTextAlike(purpose: string, boundTo: string, text: string): string {
    const bound = Buffer.from(boundTo);
    const plain = Buffer.from(text);
    // The binding's length first: a binding and a text are never read as another binding and text.
    const hmac = new Bun.CryptoHasher("sha256", this.derivedKey(`${purpose} nonce`)).update(`${bound.length}:`).update(bound).update(plain);
    return this.sealWith(purpose, hmac.digest().subarray(0, IV_BYTES), bound, plain);
  }

  /** sealWith encrypts `plain` under the key for `purpose` with nonce `iv` and additional data `bound`: sealText's form, base64url of nonce, ciphertext, tag. */
  private sealWith(purpose: string, iv: Uint8Array, bound: Buffer, plain: Buffer): string {
    const cipher = createCipheriv("aes-256-gcm", this.derivedKey(purpose), iv).setAAD(bound);
    return Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]).toString("base64url");
  }

  /** openText decrypts what sealText or sealTextAlike made for the same purpose and binding, or returns null: another key, purpose or binding, or altered. */
  openText(purpose: string, boundTo: string, sealed: string): string | null {
    const payload = Buffer.from(sealed, "base64url");
    if (payload.length < IV_BYTES + TAG_BYTES) return null;
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.derivedKey(purpose), payload.subarray(0, IV_BYTES)).setAAD(Buffer.from(boundTo));
      decipher.setAuthTag(payload.subarray(payload.length - TAG_BYTES));
      return Buffer.concat([decipher.update(payload.subarray(IV_BYTES, payload.length - TAG_BYTES)), decipher.final()]).toString("utf8");
    } catch {
      return null;
    }
  }

  /** derivedKey is the key (HKDF-SHA256) of the secrets key for `purpose`, derived once: none of them is the sealing key itself. */
  private derivedKey(purpose: string): Buffer {
    let key = this.derivedKeys.get(purpose);
    if (!key) this.derivedKeys.set(purpose, (key = Buffer.from(hkdfSync("sha256", this.key, new Uint8Array(0), `crm ${purpose}`, KEY_BYTES))));
    return key;
  }

  private decrypt(subscriptionId: string, stored: string): string {
    const payload = isSealed(stored) ? Buffer.from(stored.slice(stored.lastIndexOf(".") + 1), "base64") : null;
    if (!payload || payload.length < IV_BYTES + TAG_BYTES) throw new SecretUnreadable(`the signing secret of ${subscriptionId} is not sealed`);
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.key, payload.subarray(0, IV_BYTES)).setAAD(Buffer.from(subscriptionId));
      decipher.setAuthTag(payload.subarray(payload.length - TAG_BYTES));
      return Buffer.concat([decipher.update(payload.subarray(IV_BYTES, payload.length - TAG_BYTES)), decipher.final()]).toString("utf8");
    } catch {
      throw new SecretUnreadable(`the signing secret of ${subscriptionId} does not open with this secrets key`);
    }
  }
}

const hintOf = (secret: string) => secret.slice(SECRET_PREFIX.length, SECRET_PREFIX.length + HINT_LENGTH);

/** isSealed tells whether a stored secret is sealed (every one is once migration 0011 ran). */
export function isSealed(stored: string): boolean {
  return stored.startsWith(SEALED_PREFIX);
}

/** maskStoredSecret shows a stored secret as whsec_ and its first characters, without opening it. */
export function maskStoredSecret(stored: string): string {
  const hint = isSealed(stored) ? stored.slice(SEALED_PREFIX.length, stored.indexOf(".", SEALED_PREFIX.length)) : hintOf(stored);
  return `${SECRET_PREFIX}${hint}…`;
}

/** secretsKeyPath is where the secrets key is read: --secrets-key-file, else secrets.key in the data directory. */
export function secretsKeyPath(config: Pick<Config, "secretsKeyFile" | "dataDir">): string {
  return config.secretsKeyFile || join(config.dataDir, SECRETS_KEY_FILE_NAME);
}

/**
 * unreadableKey is the refusal of a secrets key file the process may not read, or not look at;
 * another user's file, or data directory, is named with the fix (a file named by the setting
 * stands alone: a folder above it is not the service's to chown).
 */
function unreadableKey(config: Pick<Config, "secretsKeyFile" | "dataDir">, error: unknown): ConfigError {
  const path = secretsKeyPath(config);
  return new ConfigError(`secrets key file ${path} cannot be read: ${notOwnedText(path, config.secretsKeyFile ? path : config.dataDir) ?? fileErrorText(error)}`);
}

/**
 * secretsKeyExists tells whether the secrets key file is there. One the process may not look at
 * (behind a directory it may not enter) is refused in one line, not taken for missing: a missing
 * key is made anew, and a reset takes it for lost and deletes every subscription.
 */
export function secretsKeyExists(config: Pick<Config, "secretsKeyFile" | "dataDir">): boolean {
  const path = secretsKeyPath(config);
  try {
    return pathExists(path);
  } catch (error) {
    throw unreadableKey(config, error);
  }
}

/**
 * loadSecretsKey reads the secrets key (base64 of 32 bytes). A file named by --secrets-key-file
 * must exist; the default one in the data directory is created (0600) when missing. `created`
 * tells the caller to say so, since the key must be kept, and backed up, beside the database.
 * On PostgreSQL the file must be named: instances sharing the database must share the key, and a
 * key made up in each instance's data directory would seal secrets the others cannot open.
 */
export function loadSecretsKey(config: Pick<Config, "secretsKeyFile" | "dataDir"> & Partial<Pick<Config, "databaseUrl">>): { key: Uint8Array; path: string; created: boolean; openTo: string | null } {
  if (config.databaseUrl && !config.secretsKeyFile) {
    throw new ConfigError(
      "on PostgreSQL (--database-url) every instance must read the same secrets key: pass --secrets-key-file FILE (CRM_SECRETS_KEY_FILE); " +
        "after copy-to-postgres that is the data directory's secrets.key, for a new database create one with: (umask 077; head -c 32 /dev/urandom | base64 > FILE)",
    );
  }
  const path = secretsKeyPath(config);
  // A start killed while it made the key left its partial file, whether or not a key was made since.
  removeStalePartials(path);
  if (!secretsKeyExists(config)) {
    if (config.secretsKeyFile) throw new ConfigError(`secrets key file ${path} (--secrets-key-file, CRM_SECRETS_KEY_FILE) does not exist`);
    const key = randomBytes(KEY_BYTES);
    // Durable before any secret is sealed with it (the sealed secrets are committed with a sync):
    // written and synced under a partial name, then published. Another process that made a key
    // meanwhile keeps its own, which is read below.
    const partial = partialName(path);
    createOwnerOnlyFile(partial);
    giveToFolderOwner(partial);
    writeFileSync(partial, `${key.toString("base64")}\n`);
    fsyncPath(partial);
    if (publishFile(partial, path)) return { key, path, created: true, openTo: null };
  }
  let text: string;
  try {
    text = readFileSync(path, "utf8").trim();
  } catch (error) {
    throw unreadableKey(config, error);
  }
  const key = Buffer.from(text, "base64");
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text) || key.length !== KEY_BYTES) throw new ConfigError(`secrets key file ${path} does not hold a key (base64 of ${KEY_BYTES} random bytes)`);
  return { key, path, created: false, openTo: keyOpenTo(path) };
}

/** keyOpenTo words the warning of a key file other users may read (openToOthers), with the way to replace a key that may have been read, or null. */
function keyOpenTo(path: string): string | null {
  const openTo = openToOthers(path, "the secrets key file", "whoever may read it and gets a backup can read every signing secret");
  return openTo && `${openTo}; if someone may have read it, replace the key: crm secrets-key rotate --new-key-file NEW`;
}

/**
 * secretsKeyOpenTo words the warning of the settings' secrets key file when other users may read
 * it (keyOpenTo), or null: a command prints it, as serve logs the key it loads. On PostgreSQL
 * without --secrets-key-file no key is read, and the data directory's is not named.
 */
export function secretsKeyOpenTo(config: Pick<Config, "secretsKeyFile" | "dataDir" | "databaseUrl">): string | null {
  if (config.databaseUrl && !config.secretsKeyFile) return null;
  try {
    return keyOpenTo(secretsKeyPath(config));
  } catch {
    // A key this user may not look at is refused where it is read (unreadableKey); a command that reads none goes on.
    return null;
  }
}

/**
 * sealStoredSecrets seals every signing secret, and previous secret of a rotation, still stored in
 * clear (migration 0011), and the secret in each kept answer of an idempotent create or rotation,
 * which a crm before 0011 kept in clear too (a replay opens it), and returns how many it sealed.
 * The key is asked for only when there is one to seal.
 */
export function sealStoredSecrets(db: SqliteConnection, openBox: (() => SecretBox) | undefined): number {
  const rows = listUnsealedSubscriptionSecrets(db);
  const answers = listUnsealedSecretAnswers(db);
  if (rows.length + answers.length === 0) return 0;
  if (!openBox) throw new Error("signing secrets are stored in clear and migration 0011 needs the secrets key to seal them; run crm migrate or crm serve");
  const box = openBox();
  const sealed = (id: string, secret: string) => (isSealed(secret) ? secret : box.seal(id, secret));
  for (const row of rows) updateSubscriptionSecrets(db, row.id, sealed(row.id, row.secret), row.previous_secret === null ? null : sealed(row.id, row.previous_secret));
  for (const answer of answers) updateAnswerSecret(db, answer, box.seal(answer.subscription_id, answer.secret));
  return rows.length + answers.length;
}

/** KEY_CHECK_PURPOSE names the key, derived from the secrets key, that the database's check value of it is signed with. */
const KEY_CHECK_PURPOSE = "secrets key check";
/** KEY_CHECK_TEXT is the fixed text the check value signs: the same for every database, so a key always gives the same value. */
const KEY_CHECK_TEXT = "the secrets key of this crm database";

/**
 * assertDatabaseSecretsKey throws ConfigError when the key is not the database's: the database records
 * a check value of the key it was first started with (secrets_key_check), and a start with another
 * key, on any instance, is refused even before any subscription holds a secret the key could fail
 * to open. A database from before the check value is tried on one of its sealed secrets instead, as
 * it was (a subscription's, or one a kept answer holds), and then records the value of the key that opened it. A key loadSecretsKey has just created is
 * removed when refused: the database's own was lost (a restore without it), and a new file beside
 * it would pass for it, in the next backup's note too.
 */
export async function assertDatabaseSecretsKey(db: Database, box: SecretBox, key: { path: string; created: boolean }): Promise<void> {
  const recorded = await findSecretsKeyCheck(db);
  // Recorded in a write: on PostgreSQL writes take one lock, so of instances with different keys
  // starting together on a new database, the first records its key and the others find it.
  const own = recorded
    ? sameBytes(recorded, keyCheckValue(box))
    : await db.write(async (tx) => {
        const stored = await findStoredKey(tx);
        if (!isDatabaseSecretsKey(stored, box)) return false;
        if (!stored.check) await insertSecretsKeyCheck(tx, keyCheckValue(box));
        return true;
      });
  if (own) return;
  if (key.created) {
    rmSync(key.path, { force: true });
    throw new ConfigError(`secrets key file ${key.path} is missing, and this database was used with a key (it keeps a check value of it, and of any signing secrets sealed with it): put back the key kept with the database (backups do not include it), or name it with --secrets-key-file`);
  }
  throw new ConfigError(
    `secrets key file ${key.path} is not the key this database was used with (it keeps a check value of that key, and of any signing secrets sealed with it); use the key file the database was used with (--secrets-key-file, CRM_SECRETS_KEY_FILE), after crm secrets-key rotate the new one it was given`,
  );
}

/**
 * sealInWrite seals a subscription's new secret inside the write that stores it, refusing (503
 * secrets-key-replaced) when the database records another key than the box's: crm secrets-key
 * rotate replaced it under this running instance (one left running on PostgreSQL), and a secret
 * sealed with the old key would open on no instance started since. Read in the write: on
 * PostgreSQL every write takes one lock, so a rotation commits before this check, or after this
 * write and then seals its secret anew with the rest.
 */
export async function sealInWrite(tx: Db, box: SecretBox, subscriptionId: string, secret: string): Promise<string> {
  if (await isKeyReplaced(tx, box)) {
    throw secretsKeyReplaced(
      "This instance still has the secrets key that crm secrets-key rotate replaced: a signing secret sealed with it could be read by no instance started since, so nothing was changed. Send the request to another instance; the operator should restart this one with the new key file.",
    );
  }
  return box.seal(subscriptionId, secret);
}

/** isKeyReplaced tells whether the database records another key than the box's: crm secrets-key rotate replaced it under this running instance. */
export async function isKeyReplaced(db: Db, box: SecretBox): Promise<boolean> {
  const recorded = await findSecretsKeyCheck(db);
  return recorded !== null && !sameBytes(recorded, keyCheckValue(box));
}

/** secretsKeyReplaced is the 503 of a request refused by an instance left running on the key crm secrets-key rotate replaced, `detail` saying what it did not do. */
export function secretsKeyReplaced(detail: string): ProblemError {
  return new ProblemError(503, "secrets-key-replaced", detail, undefined, { "retry-after": String(KEY_REPLACED_RETRY_AFTER_SECONDS) });
}

/** KEY_REPLACED_RETRY_AFTER_SECONDS is the Retry-After of a request refused by an instance left on a replaced key: time for a load balancer to send the retry elsewhere. */
const KEY_REPLACED_RETRY_AFTER_SECONDS = 5;

/**
 * StoredKey is what a database keeps of its secrets key: the check value it records and, when it
 * records none (a database from before the check value), any one secret sealed with the key.
 */
export interface StoredKey {
  check: Uint8Array | null;
  sealed: { id: string; secret: string } | null;
}

/** findStoredKey reads what the database keeps of its secrets key (StoredKey), in one pass for the checks that take it. */
export async function findStoredKey(db: Db): Promise<StoredKey> {
  const check = await findSecretsKeyCheck(db);
  return { check, sealed: check ? null : await findOneSealedSecret(db) };
}

/**
 * isDatabaseSecretsKey tells whether the key in `box` (null: no key at all) is the database's, as a
 * start would find it from what the database keeps (`stored`): the check value it records, else (a
 * database from before it) a sealed secret the key opens. A database that records none and holds
 * no sealed secret, in a subscription or a kept answer, takes any key.
 */
export function isDatabaseSecretsKey(stored: StoredKey, box: SecretBox | null): boolean {
  if (stored.check) return box !== null && sameBytes(stored.check, keyCheckValue(box));
  return stored.sealed === null || (box !== null && opensSecret(box, stored.sealed));
}

/** hasSecretsKey tells whether a database keeping `stored` has a secrets key of its own: it records one's check value, or holds a secret sealed with one (a subscription's or a kept answer's). */
export function hasSecretsKey(stored: StoredKey): boolean {
  return stored.check !== null || stored.sealed !== null;
}

/** recordReplacedSecretsKey makes the database record the key in `box` as its own, in place of a lost or a rotated one's, in the caller's write (secrets-key reset, secrets-key rotate). */
export async function recordReplacedSecretsKey(db: Db, box: SecretBox): Promise<void> {
  await deleteSecretsKeyCheck(db);
  await insertSecretsKeyCheck(db, keyCheckValue(box));
}

/** keyCheckValue is the check value of the box's key, the one the database records in secrets_key_check. */
function keyCheckValue(box: SecretBox): Uint8Array {
  return box.signature(KEY_CHECK_PURPOSE, KEY_CHECK_TEXT);
}

/** opensSecret tells whether the box opens a secret sealed to the subscription `id`. */
function opensSecret(box: SecretBox, { id, secret }: { id: string; secret: string }): boolean {
  try {
    box.open(id, secret);
    return true;
  } catch (error) {
    if (error instanceof SecretUnreadable) return false;
    throw error;
  }
}
