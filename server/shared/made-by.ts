/**
 * MadeBy is who made an API token or a webhook subscription (migration 0047): an operator on the
 * console (their email kept, as a removed operator's row goes), the command line (`crm token
 * create`) or an API token (a subscription created through the API). Records made before 0047
 * have none: null, unknown.
 */
export type MadeBy = { kind: "operator"; id: string; email: string } | { kind: "command_line" } | { kind: "api_token"; id: string };

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
