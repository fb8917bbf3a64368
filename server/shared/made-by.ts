/**
 * MadeBy is who made an API token or a webhook subscription (migration 0047): an operator on the
 * console (their email kept, as a removed operator's row goes), the command line (`crm token
 * create`) or an API token (a subscription created through the API). Records made before 0047
 * have none: null, unknown.
 */
export type MadeBy = { kind: "operator"; id: string; email: string } | { kind: "command_line"; command?: string } | { kind: "api_token"; id: string };

/**
 * ChangeMaker is who made a change that makes an event or changes a subscription's state
 * (migration 0052): an API token, an operator on the console, a command (named: `command` is
 * "user delete" for `crm user delete`), or the delivery loop (a 410, a failing streak, attempts
 * used up).
 */
export type ChangeMaker = MadeBy | { kind: "delivery_loop" };

/**
 * ChangeOrigin is what made a change, kept on its event (migrations 0041, 0050, 0052): the id of
 * its request (null: a command's or the delivery loop's change, which no request made) and its
 * maker (null: not known, a request that authenticated as no one).
 */
export interface ChangeOrigin {
  requestId: string | null;
  madeBy: ChangeMaker | null;
}

/** DELIVERY_LOOP is the origin of the delivery loop's changes: a subscription disabled, a delivery's attempts used up. */
export const DELIVERY_LOOP: ChangeOrigin = { requestId: null, madeBy: { kind: "delivery_loop" } };

/** commandOrigin is the origin of the changes of `crm <command>` ("user delete"). */
export function commandOrigin(command: string): ChangeOrigin {
  return { requestId: null, madeBy: { kind: "command_line", command } };
}

/** storedMaker is how a change's maker is stored (events.made_by, webhook_subscriptions.paused_by and the rest): as the JSON the console reads back. */
export function storedMaker(madeBy: ChangeMaker | null): string | null {
  return madeBy === null ? null : JSON.stringify(madeBy);
}

/** changeMakerOf reads a stored change maker back (storedMaker); null when none was recorded. */
export function changeMakerOf(stored: string | null): ChangeMaker | null {
  return stored === null ? null : (JSON.parse(stored) as ChangeMaker);
}

/** MAKER_KINDS are the kinds of maker the API tells (makerKind): which token or operator is the console's to say. */
export const MAKER_KINDS = ["api_token", "operator", "command_line", "delivery_loop"] as const;

/**
 * makerKind is what the API says of a change's maker: its kind only. Every token holder reads a
 * subscription, and no API answer names an operator or another integration's token.
 */
export function makerKind(madeBy: ChangeMaker | null): (typeof MAKER_KINDS)[number] | null {
  return madeBy?.kind ?? null;
}

/** MadeByColumns are the columns a MadeBy is stored in, on api_tokens and webhook_subscriptions. */
export interface MadeByColumns {
  created_by: string | null;
  created_by_email: string | null;
}

/** COMMAND_LINE is created_by of what the command line made: it names no operator nor token. */
const COMMAND_LINE = "cli";

/** madeByColumns is how a maker is stored. */
export function madeByColumns(madeBy: MadeBy): MadeByColumns {
  if (madeBy.kind === "operator") return { created_by: madeBy.id, created_by_email: madeBy.email };
  return { created_by: madeBy.kind === "command_line" ? COMMAND_LINE : madeBy.id, created_by_email: null };
}

/** madeByOf reads a stored maker back; null when none was recorded (made before migration 0047). */
export function madeByOf(columns: MadeByColumns): MadeBy | null {
  const { created_by: by, created_by_email: email } = columns;
  if (by === null) return null;
  if (by === COMMAND_LINE) return { kind: "command_line" };
  if (email !== null) return { kind: "operator", id: by, email };
  return { kind: "api_token", id: by };
}

/** madeByOperator is the maker of what an operator made on the console. */
export function madeByOperator(operator: { id: string; email: string }): MadeBy {
  return { kind: "operator", id: operator.id, email: operator.email };
}

/** MakerNames is what names a token's or a subscription's maker: the operators there are now (one not among them was removed) and each API token's name and start. */
export interface MakerNames {
  operators: ReadonlySet<string>;
  tokens: ReadonlyMap<string, { name: string; prefix: string }>;
}

/**
 * FORGOTTEN_EMAIL is what `crm operator forget` keeps in place of a removed operator's email, in
 * created_by_email and in a stored change maker's email: not an address (no @), so no operator has
 * it, and created_by_email stays non-null, which tells an operator's record from an API token's.
 */
export const FORGOTTEN_EMAIL = "(forgotten)";

/** MADE_BY_WORDS are the words "Made by" says, on the console and the command line alike: for a maker not recorded, the command line, a removed operator (after their email), a forgotten one (named so, after anOperator), an API token (before its name). */
export const MADE_BY_WORDS = {
  unknown: "unknown",
  commandLine: "command line",
  removed: "(removed)",
  anOperator: "an operator",
  forgotten: "(removed, forgotten)",
  apiToken: "API token",
  deliveryLoop: "the delivery loop",
} as const;

/**
 * operatorWords says an operator maker in two parts, the console setting the second apart: their
 * email and nothing while they are an operator, their email and "(removed)" once removed, "an
 * operator" and "(removed, forgotten)" once `crm operator forget` replaced their email.
 */
export function operatorWords(madeBy: { id: string; email: string }, names: MakerNames): { name: string; note: string | null } {
  if (madeBy.email === FORGOTTEN_EMAIL) return { name: MADE_BY_WORDS.anOperator, note: MADE_BY_WORDS.forgotten };
  return { name: madeBy.email, note: names.operators.has(madeBy.id) ? null : MADE_BY_WORDS.removed };
}

/** commandLineText says a command-line maker: "command line", with the command when one was recorded ("command line (crm user delete)"). */
export function commandLineText(madeBy: { command?: string }): string {
  return madeBy.command === undefined ? MADE_BY_WORDS.commandLine : `${MADE_BY_WORDS.commandLine} (crm ${madeBy.command})`;
}

/**
 * madeByText says who made a token or a subscription as plain text, in the console's MadeByText
 * words (`crm token list`): an operator by email ("(removed)" once they are; operatorWords), the command line,
 * an API token by name and start, "unknown" before migration 0047. A name is as stored: escape it for a terminal.
 */
export function madeByText(madeBy: MadeBy | null, names: MakerNames): string {
  if (madeBy === null) return MADE_BY_WORDS.unknown;
  if (madeBy.kind === "command_line") return commandLineText(madeBy);
  if (madeBy.kind === "operator") {
    const { name, note } = operatorWords(madeBy, names);
    return note === null ? name : `${name} ${note}`;
  }
  const token = names.tokens.get(madeBy.id);
  return `${MADE_BY_WORDS.apiToken} ${token ? `${token.name} (${token.prefix}…)` : madeBy.id}`;
}
