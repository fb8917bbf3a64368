import { checkMakerStands } from "../auth/service.ts";
import type { Database, Db } from "../db/sql.ts";
import { fieldsChecker } from "../http/schema-errors.ts";
import { MAX_OPERATOR_PASSWORD_LENGTH } from "../limits/limits.ts";
import { randomSecret, sha256 } from "../shared/crypto.ts";
import { newId } from "../shared/ids.ts";
import { asciiEmail } from "../shared/domains.ts";
import { madeByOperator } from "../shared/made-by.ts";
import { notFound, ProblemError, validationProblem } from "../shared/problem.ts";
import { toTimestamp, toOptionalTimestamp } from "../shared/time.ts";
import type { SecretBox } from "../webhooks/secrets.ts";
import { DEVICE_FAILURES, DEVICES_PER_OPERATOR, newDeviceCookie, readDeviceCookie, type DeviceCookie } from "./devices.ts";
import { NewPassword, OperatorEmail, OperatorInput, type Operator, type OperatorLink, type OperatorSummary, type PendingLink } from "./model.ts";
import {
  claimDeviceCheck,
  clearLoginFailures,
  clearLoginFailuresOfAccount,
  countOperators,
  deleteDevice,
  deleteEndedSessions,
  deleteLapsedSignInTurns,
  findSignInTurn,
  deleteLoginFailuresBefore,
  deleteOperator,
  deleteOperatorLink,
  deleteOperatorLinksMadeBy,
  deleteOperatorLinksOf,
  deleteShownOperatorLink,
  deleteSession,
  findLoginFailures,
  findOperatorByEmail,
  findOperatorById,
  findOperatorLink,
  findSessionWithOperator,
  insertDevice,
  insertFirstOperator,
  insertOperator,
  insertSession,
  listOperators,
  listPendingLinks,
  pullBackLoginFailures,
  pullBackSignInTurns,
  recordLoginFailure,
  replaceOperatorLink,
  addSetupCode,
  setupCodeIsValid,
  takeSignInTurn,
  touchSession,
  updateOperatorPassword,
  type OperatorRow,
} from "./store.ts";

/** SESSION_IDLE_MS ends a session that has not been used for 12 hours. */
export const SESSION_IDLE_MS = 12 * 60 * 60 * 1000;
/**
 * SESSION_MAX_MS ends a session 24 hours after sign-in, however much it is used: a console tab
 * left open refreshes its deliveries every few seconds, and would otherwise keep a session (and a
 * cookie taken from that browser) alive for ever.
 */
export const SESSION_MAX_MS = 24 * 60 * 60 * 1000;
const SESSION_TOUCH_MS = 60_000; // a session's last_seen_at, and its operator's, is written at most once a minute per session
/** SETUP_CODE_TTL_MS is how long the first-run setup link works. */
export const SETUP_CODE_TTL_MS = 30 * 60 * 1000;
/** OPERATOR_LINK_TTL_MS is how long an invitation or password-reset link works. */
export const OPERATOR_LINK_TTL_MS = 72 * 60 * 60 * 1000;
/** LOGIN_WINDOW_MS is the window in which failed sign-ins are counted. */
const LOGIN_WINDOW_MS = 15 * 60 * 1000;
/** FREE_PAIR_FAILURES is how many wrong passwords one address may type for one account before each next try waits. */
export const FREE_PAIR_FAILURES = 3;
/**
 * PACED_AFTER is how many failures in a window put an account, or an address, under attack: from
 * then on the account's password checks from addresses that have failed for it are paced, and
 * every check from the address, a new email's too.
 */
export const PACED_AFTER = { account: 10, address: 20 } as const;
/** PACE_MS is the time between two paced password checks of one account, or from one address, over every instance together. */
const PACE_MS = 1000;
/** MAX_PACE_WAIT_MS is the longest a paced check, or one waiting for a free checker, waits for its turn; a longer queue is answered 429. */
const MAX_PACE_WAIT_MS = 5000;
/**
 * PASSWORD_CHECKERS is how many password checks (argon2id, about 64 MiB and 50-100 ms of a core
 * each) from addresses that have failed, or that send several at once, run at once in a process;
 * the others wait in turn. Twenty checks a second from one client took 60% of the API's
 * throughput on 2 cores (by email 35,000 -> 13,000-15,000 requests a second). An address that has
 * not been guessing is checked at once, whatever waits.
 */
const PASSWORD_CHECKERS = 1;

const checkOperatorInput = fieldsChecker(OperatorInput);
const checkOperatorEmail = fieldsChecker(OperatorEmail);
const checkNewPassword = fieldsChecker(NewPassword);

/** normalEmail is how an operator's email is stored and compared: trimmed, lowercased, its domain in ASCII form (asciiEmail). */
export function normalEmail(email: string): string {
  return asciiEmail(email.trim());
}

/** validOperator checks an operator's email and password against OperatorInput and returns the normalised email, or throws 422 naming each field. */
function validOperator(input: { email: string; password: string }): string {
  const email = normalEmail(input.email);
  checkOperatorInput({ email, password: input.password });
  return email;
}

/** validNewPassword checks a password typed twice, or throws 422. */
function validNewPassword(input: NewPassword): void {
  checkNewPassword(input);
  if (input.password !== input.password_again) throw validationProblem([{ pointer: "/password_again", detail: "must repeat the password" }], "The two passwords differ.");
}

function hashPassword(password: string): Promise<string> {
  return Bun.password.hash(password, { algorithm: "argon2id" });
}

async function operatorRow(email: string, password: string, now: number): Promise<OperatorRow> {
  return { id: newId("opr", now), email, password_hash: await hashPassword(password), created_at: now, updated_at: now, last_seen_at: null };
}

function operatorExists(email: string): ProblemError {
  return new ProblemError(409, "operator-exists", `An operator with email ${email} already exists.`);
}

/**
 * createOperator adds an operator who can sign in to the console (the `operator create` command).
 * An invitation of their email is kept, listed no more (pendingLinks), so that its link tells
 * the invitee the operator exists and to sign in; deleted, the link could only call itself invalid
 * and send them to ask for a new one, which inviteOperator refuses.
 */
export async function createOperator(db: Database, input: { email: string; password: string }, now = Date.now()): Promise<Operator> {
  const email = validOperator(input);
  const row = await operatorRow(email, input.password, now);
  return db.write(async (tx) => {
    if (await findOperatorByEmail(tx, email)) throw operatorExists(email);
    await insertOperator(tx, row);
    return { id: row.id, email: row.email };
  });
}

/** hasOperators tells whether anyone can sign in yet. */
export async function hasOperators(db: Db): Promise<boolean> {
  return (await countOperators(db)) > 0;
}

/** operatorSummaries lists every operator, oldest first, for the operators page and `operator list`. */
export async function operatorSummaries(db: Db): Promise<OperatorSummary[]> {
  return (await listOperators(db)).map((row) => ({ id: row.id, email: row.email, created_at: toTimestamp(row.created_at), last_seen_at: toOptionalTimestamp(row.last_seen_at) }));
}

/** findOperator returns an operator by id, or null. */
export async function findOperator(db: Db, id: string): Promise<Operator | null> {
  const row = await findOperatorById(db, id);
  return row ? { id: row.id, email: row.email } : null;
}

/** operatorByEmail returns the operator with an email, or throws 404 (the CLI names operators by email). */
export async function operatorByEmail(db: Db, email: string): Promise<Operator> {
  const normalised = normalEmail(email);
  const row = await findOperatorByEmail(db, normalised);
  if (!row) throw new ProblemError(404, "not-found", `No operator has the email ${normalised}.`);
  return { id: row.id, email: row.email };
}

/**
 * removeOperator removes an operator, ends their sessions and withdraws the links naming them and
 * every link they made (a reset link for a colleague, an invitation of an address of their own,
 * would let them back in); the last operator stays, so someone can always sign in.
 */
export function removeOperator(db: Database, id: string): Promise<Operator> {
  return db.write((tx) => dropOperator(tx, id));
}

/** dropOperator is removeOperator's part inside a write, so the caller's write commits the removal with whatever else it records. */
export async function dropOperator(tx: Db, id: string): Promise<Operator> {
  const row = await findOperatorById(tx, id);
  if (!row) throw notFound("operator", id);
  if (!(await deleteOperator(tx, id))) throw new ProblemError(409, "last-operator", "This is the only operator; add another before removing it, or nobody could sign in.");
  await deleteOperatorLinksOf(tx, row.email);
  await deleteOperatorLinksMadeBy(tx, row.id);
  return { id: row.id, email: row.email };
}

/** resetOperatorPassword sets an operator's password (the `operator reset-password` command), ends every session of theirs and withdraws their pending reset links. */
export async function resetOperatorPassword(db: Database, secrets: SecretBox, email: string, password: string, now = Date.now()): Promise<Operator> {
  const row = await operatorByEmail(db, email);
  validOperator({ email: row.email, password });
  const hash = await hashPassword(password);
  await db.write(async (tx) => {
    await updateOperatorPassword(tx, row.id, hash, now);
    await forgetFailuresOf(tx, secrets, row.email);
  });
  return { id: row.id, email: row.email };
}

/** inviteOperator makes a one-time link (OPERATOR_LINK_TTL_MS) with which the invitee chooses a password and becomes an operator (invitedBy: the operator who made it, null for none); returns its code. */
export function inviteOperator(db: Database, email: string, invitedBy: Operator | null, now = Date.now()): Promise<string> {
  const code = randomSecret();
  return db.write(async (tx) => {
    await issueInvite(tx, email, invitedBy, code, now);
    return code;
  });
}

/**
 * issueInvite is inviteOperator inside the caller's write, with the link's code the caller drew (a
 * console form keeps it sealed in its answer, to show the same link when sent twice). Returns the email as stored.
 */
export async function issueInvite(tx: Db, email: string, invitedBy: Operator | null, code: string, now: number): Promise<string> {
  const normalised = normalEmail(email);
  checkOperatorEmail({ email: normalised });
  if (await findOperatorByEmail(tx, normalised)) throw operatorExists(normalised);
  await storeOperatorLink(tx, "invite", normalised, code, invitedBy, now);
  return normalised;
}

/** passwordResetLink makes a one-time link with which an operator sets a new password; returns its code. */
export function passwordResetLink(db: Database, id: string, madeBy: Operator | null, now = Date.now()): Promise<{ operator: Operator; code: string }> {
  const code = randomSecret();
  return db.write(async (tx) => ({ operator: await issueResetLink(tx, id, madeBy, code, now), code }));
}

/** issueResetLink is passwordResetLink inside the caller's write, with the link's code the caller drew (as issueInvite). */
export async function issueResetLink(tx: Db, id: string, madeBy: Operator | null, code: string, now: number): Promise<Operator> {
  const row = await findOperatorById(tx, id);
  if (!row) throw notFound("operator", id);
  await storeOperatorLink(tx, "reset", row.email, code, madeBy, now);
  return { id: row.id, email: row.email };
}

/**
 * storeOperatorLink stores a link made by operator `madeBy` (null: by none), inside the caller's
 * write, or throws MakerGone when that operator was removed while their form ran: their removal
 * withdrew the links they had made, and one stored after it would outlive them for 72 hours.
 */
async function storeOperatorLink(tx: Db, purpose: OperatorLink["purpose"], email: string, code: string, madeBy: Operator | null, now: number): Promise<void> {
  await checkMakerStands(tx, madeBy && madeByOperator(madeBy));
  await replaceOperatorLink(tx, { code_hash: sha256(code), purpose, email, created_by: madeBy?.id ?? null, created_at: now, expires_at: now + OPERATOR_LINK_TTL_MS });
}

/** pendingLinks lists the one-time links not used yet, invitations and password resets, with who made each; an invitation of an email that is an operator's (made by `operator create` meanwhile) is left out. */
export async function pendingLinks(db: Db, now = Date.now()): Promise<PendingLink[]> {
  return (await listPendingLinks(db, now)).map((row) => ({
    purpose: row.purpose,
    email: row.email,
    created_by: row.created_by_email,
    created_at: toTimestamp(row.created_at),
    expires_at: toTimestamp(row.expires_at),
  }));
}

/**
 * withdrawOperatorLink withdraws a pending link as pendingLinks listed it (its purpose, email and
 * creation time): its code stops working. A newer link for the email is left alone; false when the
 * listed one is gone already (used, withdrawn, replaced or expired).
 */
export function withdrawOperatorLink(db: Database, link: Pick<PendingLink, "purpose" | "email" | "created_at">): Promise<boolean> {
  const createdAt = Date.parse(link.created_at);
  if (!Number.isInteger(createdAt)) return Promise.resolve(false);
  return db.write((tx) => deleteShownOperatorLink(tx, link.purpose, link.email, createdAt));
}

/** operatorLink tells what a one-time link grants, or null when it is unknown, expired or used. */
export async function operatorLink(db: Db, code: string, now = Date.now()): Promise<OperatorLink | null> {
  if (code.length === 0 || code.length > 100) return null;
  const row = await findOperatorLink(db, sha256(code), now);
  return row ? { purpose: row.purpose, email: row.email, operator_exists: (await findOperatorByEmail(db, row.email)) !== null } : null;
}

function linkInvalid(): ProblemError {
  return new ProblemError(403, "link-invalid", "This link is invalid, expired or already used. Ask an operator for a new one.");
}

/**
 * acceptOperatorLink uses a one-time link: an invitation creates the operator with the password
 * chosen, a reset sets the operator's new password (ending their other sessions and devices).
 * Returns a new session secret and device cookie, so the person is signed in at once, and their
 * next sign-in from this browser is not paced by another client's guessing.
 */
export async function acceptOperatorLink(db: Database, secrets: SecretBox, input: { code: string } & NewPassword, now = Date.now()): Promise<SignedIn> {
  const link = await operatorLink(db, input.code, now);
  if (!link) throw linkInvalid();
  validNewPassword(input);
  const codeHash = sha256(input.code);
  // The link is used up in the write that acts on it: two tabs racing through it get one result.
  if (link.purpose === "invite") {
    const row = await operatorRow(link.email, input.password, now);
    return db.write(async (tx) => {
      if (await findOperatorByEmail(tx, link.email)) throw operatorExists(link.email);
      if (!(await deleteOperatorLink(tx, codeHash))) throw linkInvalid();
      await insertOperator(tx, row);
      return letIn(tx, secrets, row.id, now);
    });
  }
  const hash = await hashPassword(input.password);
  return db.write(async (tx) => {
    const row = await findOperatorByEmail(tx, link.email);
    if (!row || !(await deleteOperatorLink(tx, codeHash))) throw linkInvalid();
    await updateOperatorPassword(tx, row.id, hash, now);
    await forgetFailuresOf(tx, secrets, row.email);
    return letIn(tx, secrets, row.id, now);
  });
}

/** issueSetupCode makes the one-time code of the first-run setup link; earlier codes stay valid until they expire or an operator is created. */
export async function issueSetupCode(db: Database, now = Date.now()): Promise<string> {
  const code = randomSecret();
  await db.write((tx) => addSetupCode(tx, sha256(code), now, now + SETUP_CODE_TTL_MS));
  return code;
}

/** setupCodeUsable tells whether a setup link still works: its code is current and no operator exists yet. */
export async function setupCodeUsable(db: Db, code: string, now = Date.now()): Promise<boolean> {
  return code.length > 0 && code.length <= 100 && !(await hasOperators(db)) && (await setupCodeIsValid(db, sha256(code), now));
}

/** completeSetup creates the first operator through a valid setup link and returns a new session secret and device cookie. */
export async function completeSetup(db: Database, secrets: SecretBox, input: { code: string; email: string } & NewPassword, now = Date.now()): Promise<SignedIn> {
  if (!(await setupCodeUsable(db, input.code, now))) throw setupLinkInvalid();
  const email = validOperator(input);
  validNewPassword(input);
  const row = await operatorRow(email, input.password, now);
  // Checked again inside the transaction: two people racing through the same link get one operator.
  const signedIn = await db.write(async (tx) => ((await insertFirstOperator(tx, row)) ? letIn(tx, secrets, row.id, now) : null));
  if (signedIn === null) throw setupLinkInvalid();
  return signedIn;
}

function setupLinkInvalid(): ProblemError {
  return new ProblemError(403, "setup-link-invalid", "This setup link is invalid, expired or already used. Restart the server for a new link, or run `crm operator create --email E --password-stdin`.");
}

let dummyHash: Promise<string> | undefined;

/** pairDelayMs is the wait after the last failure of an account and address pair: none for the first few, then 1 s doubling up to the window. */
export function pairDelayMs(failures: number): number {
  return failures < FREE_PAIR_FAILURES ? 0 : Math.min(1000 * 2 ** (failures - FREE_PAIR_FAILURES), LOGIN_WINDOW_MS);
}

/** THROTTLE_PURPOSE names the key, derived from the secrets key, that the sign-in throttle keeps emails under. */
const THROTTLE_PURPOSE = "console sign-in throttle";

/**
 * emailSubject is how the sign-in throttle (login_failures, sign_in_turns) keeps a normalised email
 * typed at sign-in: its HMAC under a key derived from the secrets key, never the email. Whatever is
 * typed there is kept for the window, a customer's address or a typo as well as an operator's; a
 * dump of the database holds none of them, and without the key cannot be checked against a list of emails either.
 */
export function emailSubject(secrets: SecretBox, email: string): string {
  return Buffer.from(secrets.signature(THROTTLE_PURPOSE, email)).toString("base64url");
}

/** pairSubject names an account (its emailSubject) and address pair in login_failures. */
function pairSubject(account: string, address: string): string {
  return `${account} ${address}`; // an emailSubject holds no space, so unlocking one account never matches another
}

/** forgetFailuresOf forgets every failed sign-in counted against the account with `email`, from any address; returns how many records went. */
function forgetFailuresOf(db: Db, secrets: SecretBox, email: string): Promise<number> {
  const account = emailSubject(secrets, email);
  return clearLoginFailuresOfAccount(db, account, pairSubject(account, ""));
}

/**
 * failuresInWindow is a subject's failure count in the current window (0 once it has passed). Stamps
 * later than `now` are pulled back to it, every subject's at once: left ahead after the clock went
 * back, they would hold the pair's wait and the window for the length of the step, not at most the
 * 15 minutes their count allows.
 */
async function failuresInWindow(db: Db, scope: "account" | "address" | "pair", subject: string, now: number) {
  let row = await findLoginFailures(db, scope, subject);
  if (row && Math.max(row.window_start_at, row.last_failure_at) > now) {
    await pullBackLoginFailures(db, now);
    row = { ...row, window_start_at: Math.min(row.window_start_at, now), last_failure_at: Math.min(row.last_failure_at, now) };
  }
  return row && row.window_start_at > now - LOGIN_WINDOW_MS ? row : null;
}

/**
 * SignInsUnderWay counts the sign-ins under way from each address, whose failures are not recorded
 * yet; the counts of one database are shared by its server (each instance keeps its own).
 */
class SignInsUnderWay {
  private readonly counts = new Map<string, number>();

  /** begin counts a sign-in from `address` as under way and returns how many others from it are. */
  begin(address: string): number {
    const others = this.counts.get(address) ?? 0;
    this.counts.set(address, others + 1);
    return others;
  }

  /** end counts a sign-in from `address` as done. */
  end(address: string): void {
    const left = (this.counts.get(address) ?? 1) - 1;
    if (left > 0) this.counts.set(address, left);
    else this.counts.delete(address);
  }
}

const signInsUnderWay = new WeakMap<object, SignInsUnderWay>();

/**
 * takeTurns takes the next turn of each paced key in order, at most one per PACE_MS per key over
 * every instance of the database, and returns when the latest of them comes; or, at the first key
 * whose turn is past MAX_PACE_WAIT_MS, stops and returns its index. The clock is read inside the
 * write: writes run one at a time on every instance, so turns go in the order of their times, and a
 * check whose write waited behind others does not find its turn pushed past the wait by that delay.
 */
async function takeTurns(db: Database, keys: string[]): Promise<{ at: number } | { refused: number }> {
  // A key whose queue is full is refused on a read: a flood of guesses costs no write each. A turn
  // past the furthest one given means the clock went back since: the write pulls it back.
  for (const [index, key] of keys.entries()) {
    const next = await findSignInTurn(db, key);
    const now = Date.now();
    if (next !== null && next > now + MAX_PACE_WAIT_MS && next <= now + MAX_PACE_WAIT_MS + PACE_MS) return { refused: index };
  }
  return db.write(async (tx) => {
    const now = Date.now();
    await deleteLapsedSignInTurns(tx, now);
    await pullBackSignInTurns(tx, now + MAX_PACE_WAIT_MS + PACE_MS, now + MAX_PACE_WAIT_MS);
    let at = now;
    for (const [index, key] of keys.entries()) {
      const turn = await takeSignInTurn(tx, key, now, PACE_MS, now + MAX_PACE_WAIT_MS);
      if (turn === null) return { refused: index };
      at = Math.max(at, turn);
    }
    return { at };
  });
}

/** Turns lets at most `size` holders run at once; the others wait in the order they came, each at most as long as it said. */
class Turns {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly size: number) {}

  /** take resolves with true once a turn is this caller's (call `give` when done), or with false after `maxWaitMs` without one. */
  take(maxWaitMs: number): Promise<boolean> {
    if (this.running < this.size) {
      this.running++;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const start = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(start), 1);
        resolve(false);
      }, maxWaitMs);
      this.waiting.push(start);
    });
  }

  /** give hands the caller's turn to the next waiting caller, if any. */
  give(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.running--;
  }
}

const passwordCheckers = new Turns(PASSWORD_CHECKERS);

/** checkPassword verifies a password against a hash, a `suspect` one in one of the process's PASSWORD_CHECKERS turns; null when none came within MAX_PACE_WAIT_MS. */
async function checkPassword(password: string, hash: string, suspect: boolean): Promise<boolean | null> {
  if (!suspect) return Bun.password.verify(password, hash);
  if (!(await passwordCheckers.take(MAX_PACE_WAIT_MS))) return null;
  try {
    return await Bun.password.verify(password, hash);
  } finally {
    passwordCheckers.give();
  }
}

function tooManySignIns(waitMs: number, why = "Too many failed sign-ins from here for this account."): ProblemError {
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  const when = seconds < 120 ? `${seconds} second${seconds === 1 ? "" : "s"}` : `${Math.ceil(seconds / 60)} minutes`;
  return new ProblemError(429, "too-many-sign-ins", `${why} Try again in ${when}.`, undefined, { "retry-after": String(seconds) });
}

/** SignInInput is a sign-in form and where it came from: the client's address and the browser's device cookie, if any. */
export interface SignInInput {
  email: string;
  password: string;
  address: string;
  device?: string;
}

/** SignedIn is what a successful sign-in gives the browser: a session secret and a new device cookie. */
export interface SignedIn {
  session: string;
  device: string;
}

/**
 * signIn checks an operator's email and password and returns a new session secret and device
 * cookie. Throttling slows guessing without locking anyone out: failures count per account and
 * address pair, and after FREE_PAIR_FAILURES each further try of that pair must wait a delay that
 * doubles (429 with Retry-After before then, unchecked). While an account is under attack
 * (PACED_AFTER failures in the window), checks of pairs that have failed for it are paced to one
 * per PACE_MS, waiting for their turn; while an address is (its failures and its other sign-ins
 * under way), every check from it, so that a guesser cycling through emails costs one password
 * check a second, however many it sends at once. Checks from an address that has failed, or sends
 * several at once, run PASSWORD_CHECKERS at a time. An address that has not been guessing is
 * checked at once, so the right password gets in whatever others are guessing. A browser that
 * signed in as this operator before (its device cookie) is none of those clients: it is checked at
 * once, within the cookie's own budget of DEVICE_FAILURES, so an operator behind a guessing
 * address (a shared NAT) gets in too.
 */
export async function signIn(db: Database, secrets: SecretBox, input: SignInInput, now = Date.now()): Promise<SignedIn> {
  const underWay = signInsUnderWay.get(db) ?? signInsUnderWay.set(db, new SignInsUnderWay()).get(db)!;
  // Counted before any await: sign-ins sent together see each other.
  const othersUnderWay = underWay.begin(input.address);
  try {
    const email = normalEmail(input.email).slice(0, 254);
    const device = await trustedDevice(db, readDeviceCookie(secrets, input.device, now), email, now);
    const operator = await checkSignIn(db, { ...input, email }, emailSubject(secrets, email), device !== null, othersUnderWay, now);
    // One commit, and only while the password checked is still the operator's: a reset committed
    // during the check (argon2 takes about 100 ms) revokes what this sign-in would start.
    return await db.write(async (tx) => {
      if ((await findOperatorById(tx, operator.id))?.password_hash !== operator.password_hash) throw signInFailed();
      if (device) await deleteDevice(tx, device.idHash);
      return letIn(tx, secrets, operator.id, now);
    });
  } finally {
    underWay.end(input.address);
  }
}

/**
 * trustedDevice returns a device cookie that names the operator with `email` and still has checks
 * in its budget, having counted this sign-in's check against it (a success replaces the cookie);
 * null otherwise, and the sign-in is a stranger's. The answer is the same for an unknown email as
 * for a known one without a cookie, since no cookie names an operator that does not exist.
 */
async function trustedDevice(db: Database, cookie: DeviceCookie | null, email: string, now: number): Promise<DeviceCookie | null> {
  return cookie && (await claimDeviceCheck(db, cookie.idHash, cookie.operatorId, email, DEVICE_FAILURES, now)) ? cookie : null;
}

/**
 * checkSignIn applies the throttling rules and checks the password; returns the operator checked. A
 * trusted device skips the pair's delay and the pacing of its address and of the account (which
 * paces only pairs that have failed), its own budget standing for them; its failures are counted
 * against the pair, the account and the address all the same, and its success leaves the pair's
 * failures alone (another client there may be the one guessing). `account` is the email's emailSubject.
 */
async function checkSignIn(db: Database, input: SignInInput, account: string, trusted: boolean, othersUnderWay: number, now: number): Promise<OperatorRow> {
  const { email } = input;
  const pair = trusted ? null : await failuresInWindow(db, "pair", pairSubject(account, input.address), now);
  if (pair) {
    const wait = pair.last_failure_at + pairDelayMs(pair.failures) - now;
    if (wait > 0) throw tooManySignIns(wait);
  }
  const fromAddress = trusted ? 0 : ((await failuresInWindow(db, "address", input.address, now))?.failures ?? 0) + othersUnderWay;
  const underAttack = [
    [pair !== null && ((await failuresInWindow(db, "account", account, now))?.failures ?? 0) >= PACED_AFTER.account, `account:${account}`, undefined],
    [fromAddress >= PACED_AFTER.address, `address:${input.address}`, "Too many failed sign-ins from here."],
  ] as const;
  const paced = underAttack.filter(([isPaced]) => isPaced);
  if (paced.length > 0) {
    const turn = await takeTurns(db, paced.map(([, key]) => key));
    if ("refused" in turn) throw tooManySignIns(MAX_PACE_WAIT_MS, paced[turn.refused]![2]);
    const wait = turn.at - Date.now();
    if (wait > 0) await Bun.sleep(wait);
  }
  const operator = await findOperatorByEmail(db, email);
  // Unknown emails cost the same argon2 verification, so timing does not tell which accounts exist.
  dummyHash ??= hashPassword(randomSecret());
  const ok = input.password.length <= MAX_OPERATOR_PASSWORD_LENGTH ? await checkPassword(input.password, operator?.password_hash ?? (await dummyHash), fromAddress > 0) : false;
  if (ok === null) throw tooManySignIns(MAX_PACE_WAIT_MS, "Too many sign-ins are being checked at the moment.");
  if (!operator || !ok) {
    await deleteLoginFailuresBefore(db, now - LOGIN_WINDOW_MS);
    for (const [scope, subject] of [["pair", pairSubject(account, input.address)], ["account", account], ["address", input.address]] as const) {
      await recordLoginFailure(db, scope, subject, now, now - LOGIN_WINDOW_MS);
    }
    throw signInFailed();
  }
  if (!trusted) await clearLoginFailures(db, "pair", pairSubject(account, input.address));
  return operator;
}

function signInFailed(): ProblemError {
  return new ProblemError(401, "sign-in-failed", "The email or password is wrong.");
}

/** unlockOperator forgets every failed sign-in counted against an operator's account (the `operator unlock` command); returns how many records went. */
export async function unlockOperator(db: Database, secrets: SecretBox, email: string): Promise<number> {
  const row = await operatorByEmail(db, email);
  return forgetFailuresOf(db, secrets, row.email);
}

/** letIn starts a session of an operator and trusts the browser with a new device cookie; call it inside the write that lets the operator in. */
async function letIn(tx: Db, secrets: SecretBox, operatorId: string, now: number): Promise<SignedIn> {
  const device = newDeviceCookie(secrets, operatorId, now);
  await insertDevice(tx, device.row, DEVICE_FAILURES, DEVICES_PER_OPERATOR);
  return { session: await startSession(tx, operatorId, now), device: device.value };
}

/** startSession starts a session of an operator and returns its secret; call it inside the write that lets the operator in. */
async function startSession(tx: Db, operatorId: string, now: number): Promise<string> {
  await deleteEndedSessions(tx, now - SESSION_IDLE_MS, now - SESSION_MAX_MS);
  const secret = randomSecret();
  await insertSession(tx, { id_hash: sha256(secret), operator_id: operatorId, created_at: now, last_seen_at: now });
  return secret;
}

/**
 * sessionOperator returns the operator of a session secret used within SESSION_IDLE_MS and started
 * within SESSION_MAX_MS, and keeps the session alive; null otherwise. A visit that cannot be
 * recorded (a database turned read-only, a lock held elsewhere: writeBookkeeping) goes to
 * `unrecorded`, and the session is admitted all the same.
 */
export async function sessionOperator(db: Database, secret: string | undefined, unrecorded: (error: unknown) => void, now = Date.now()): Promise<Operator | null> {
  if (!secret || secret.length > 100) return null;
  const idHash = sha256(secret);
  const row = await findSessionWithOperator(db, idHash, now - SESSION_IDLE_MS, now - SESSION_MAX_MS);
  if (!row) return null;
  if (now - row.last_seen_at >= SESSION_TOUCH_MS) await db.writeBookkeeping((tx) => touchSession(tx, idHash, row.operator_id, now)).catch(unrecorded);
  return { id: row.operator_id, email: row.email };
}

/** endSession signs out: the session secret stops working. */
export async function endSession(db: Database, secret: string | undefined): Promise<void> {
  if (secret) await deleteSession(db, sha256(secret));
}
