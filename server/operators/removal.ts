import { changeMakerOf, commandOrigin, FORGOTTEN_EMAIL, storedMaker, type ChangeOrigin } from "../shared/made-by.ts";
import { listTokens, revokeTokensMadeBy, tokensRevoked, type ApiTokenInfo } from "../auth/service.ts";
import { replaceTokenMakerEmail } from "../auth/store.ts";
import type { Database, Db } from "../db/sql.ts";
import type { Subscription } from "../webhooks/model.ts";
import { NO_OPEN_ATTEMPTS, type OpenAttempts } from "../webhooks/health.ts";
import { disableSubscriptionsMadeBy, subscriptionsDisabled, toSubscription, type DisabledWithMaker } from "../webhooks/service.ts";
import { CHANGE_MAKER_COLUMNS, listSubscriptionsMadeBy, replaceStoredMaker, replaceSubscriptionMakerEmail, storedMakersHolding, type ChangeMakerColumn } from "../webhooks/store.ts";
import type { Operator } from "./model.ts";
import { dropOperator, normalEmail, operatorByEmail } from "./service.ts";
import { findOperatorByEmail } from "./store.ts";

/** OperatorMade is what an operator made that is still in use: their active API tokens, and the subscriptions they made or that were created with one of their tokens (that token, null when they made it themselves). */
export interface OperatorMade {
  tokens: ApiTokenInfo[];
  subscriptions: { subscription: Subscription; via: ApiTokenInfo | null }[];
}

/** operatorMade lists what an operator made (OperatorMade), for their removal's confirmation and `operator remove`. */
export async function operatorMade(db: Db, id: string): Promise<OperatorMade> {
  const theirs = (await listTokens(db)).filter((t) => t.made_by?.kind === "operator" && t.made_by.id === id);
  const subscriptions = (await listSubscriptionsMadeBy(db, id)).map((row) => ({ subscription: toSubscription(row), via: theirs.find((t) => t.id === row.created_by) ?? null }));
  return { tokens: theirs.filter((t) => t.revoked_at === null), subscriptions };
}

/** RemovalChoices are what an operator's removal also does: the console confirmation's boxes, `operator remove`'s --revoke-tokens and --disable-subscriptions. */
export interface RemovalChoices {
  revokeTokens: boolean;
  disableSubscriptions: boolean;
}

/** Removal is what an operator's removal did in its write: the operator removed, the ids of the tokens it revoked, the subscriptions it disabled. */
export interface Removal {
  operator: Operator;
  tokens_revoked: string[];
  subscriptions_disabled: DisabledWithMaker[];
}

/**
 * dropOperatorWith removes operator `id` inside the caller's write (dropOperator: their sessions,
 * the links for them and by them) and, in the same write, as chosen, revokes the API tokens they
 * made and disables the subscriptions they made or created with one of those tokens, each
 * subscription.disabled made by `origin` (the console's request, or the command), counting none of
 * the deliveries with an attempt `openHere`. Call operatorRemoved with what it returns once the write has committed.
 */
export async function dropOperatorWith(tx: Db, id: string, choices: RemovalChoices, origin: ChangeOrigin, now: number, openHere: OpenAttempts): Promise<Removal> {
  const operator = await dropOperator(tx, id);
  const revoked = choices.revokeTokens ? await revokeTokensMadeBy(tx, id, now) : [];
  const disabled = choices.disableSubscriptions ? await disableSubscriptionsMadeBy(tx, operator.id, origin, now, openHere) : [];
  return { operator, tokens_revoked: revoked, subscriptions_disabled: disabled };
}

/**
 * operatorRemoved finishes, once its write has committed, what a removal revoked and disabled:
 * this process forgets the revoked tokens (tokensRevoked), and the disabled subscriptions' pending
 * deliveries are failed `chunk` per write (counted by `failedUnsent`), those `openHere` left to their attempts; a refused write of those goes
 * to `refused`, and the delivery loop's sweep fails what it left.
 */
export async function operatorRemoved(
  db: Database,
  removal: Pick<Removal, "tokens_revoked" | "subscriptions_disabled">,
  chunk: number,
  refused: (error: unknown) => void,
  failedUnsent: (count: number) => void,
  openHere: OpenAttempts,
): Promise<void> {
  tokensRevoked(db, removal.tokens_revoked);
  await subscriptionsDisabled(db, removal.subscriptions_disabled, chunk, refused, failedUnsent, openHere);
}

/**
 * removeOperatorByEmail is `operator remove --email E`: the console's removal (dropOperatorWith),
 * in one write that also lists what the operator made (operatorMade) as it was just before, so the
 * command can say what it revoked and disabled and what stays. The refusal that stopped failing
 * the disabled subscriptions' pending deliveries, after the removal committed, is `unsent` (null: none).
 */
export async function removeOperatorByEmail(db: Database, email: string, choices: RemovalChoices, chunk: number): Promise<{ removal: Removal; made: OperatorMade; unsent: unknown }> {
  const { id } = await operatorByEmail(db, email);
  const { removal, made } = await db.write(async (tx) => {
    const made = await operatorMade(tx, id);
    return { removal: await dropOperatorWith(tx, id, choices, commandOrigin("operator remove"), Date.now(), NO_OPEN_ATTEMPTS), made };
  });
  let unsent: unknown = null;
  // A command serves no /metrics: what it fails unsent is counted by no instance, as crm secrets-key reset's.
  await operatorRemoved(db, removal, chunk, (error) => (unsent ??= error), () => {}, NO_OPEN_ATTEMPTS);
  return { removal, made, unsent };
}

/** KeptEmailColumn names, as table.column, a place a removed operator's email is kept: who made an API token or a subscription (migration 0047), who made a change (CHANGE_MAKER_COLUMNS). */
export type KeptEmailColumn = "api_tokens.created_by_email" | "webhook_subscriptions.created_by_email" | ChangeMakerColumn;

/** Forgetting is what `operator forget` did: the email as compared, with how many rows of each place it replaced; or its refusal, the current operator with that email. */
export type Forgetting = { email: string; replaced: Record<KeptEmailColumn, number> } | { current: Operator };

/**
 * forgetOperatorEmail is `operator forget --email E`, an erasure request about a former operator:
 * in one write, it puts FORGOTTEN_EMAIL in place of their email wherever it is kept after their
 * removal (KeptEmailColumn), so what they made and did stays theirs by id (operatorMade still finds
 * it) but names nobody. Refused, changing nothing, while an operator has the email: the records
 * of a current operator name them on purpose, and a forget must not race an operator's creation.
 */
export async function forgetOperatorEmail(db: Database, email: string): Promise<Forgetting> {
  const normalised = normalEmail(email);
  return db.write(async (tx) => {
    const current = await findOperatorByEmail(tx, normalised);
    if (current) return { current: { id: current.id, email: current.email } };
    const replaced: Partial<Record<KeptEmailColumn, number>> = {
      "api_tokens.created_by_email": await replaceTokenMakerEmail(tx, normalised, FORGOTTEN_EMAIL),
      "webhook_subscriptions.created_by_email": await replaceSubscriptionMakerEmail(tx, normalised, FORGOTTEN_EMAIL),
    };
    for (const column of CHANGE_MAKER_COLUMNS) {
      let count = 0;
      // The text matched finds candidates; only an operator maker with exactly this email is one.
      for (const stored of await storedMakersHolding(tx, column, JSON.stringify(normalised))) {
        const maker = changeMakerOf(stored);
        if (maker?.kind === "operator" && maker.email === normalised) count += await replaceStoredMaker(tx, column, stored, storedMaker({ ...maker, email: FORGOTTEN_EMAIL })!);
      }
      replaced[column] = count;
    }
    return { email: normalised, replaced: replaced as Record<KeptEmailColumn, number> };
  });
}
