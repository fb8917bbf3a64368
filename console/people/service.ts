import { countContactsAssignedToUser } from "../../server/contacts/store.ts";
import type { Database, Db } from "../../server/db/sql.ts";
import { checkTokenName, createApiToken, findToken, revokeApiToken, type ApiTokenInfo } from "../../server/auth/service.ts";
import { unknownParameterErrors, type ListMeta } from "../../server/http/list-query.ts";
import { fieldsChecker, fieldsProblem } from "../../server/http/schema-errors.ts";
import type { Operator } from "../../server/operators/model.ts";
import { dropOperatorWith, operatorRemoved, type RemovalChoices } from "../../server/operators/removal.ts";
import { issueInvite, issueResetLink } from "../../server/operators/service.ts";
import type { Runtime } from "../../server/runtime.ts";
import { randomSecret } from "../../server/shared/crypto.ts";
import { madeByOperator, type ChangeOrigin } from "../../server/shared/made-by.ts";
import { saveIdempotentResponse } from "../../server/idempotency/service.ts";
import { ProblemError, validationProblem } from "../../server/shared/problem.ts";
import { UserInput, type User } from "../../server/users/model.ts";
import { createUserOnce, deleteUser, listUsersPage, type DeletedUser } from "../../server/users/service.ts";
import type { ConsoleSession } from "../model.ts";
import { changeOnceForForm, onceForForm, refusedOnField } from "../shell.ts";

/** createTokenFromForm creates an API token named in the console, made by the signed-in operator, in a write that refuses it if they were removed since (MakerGone); the token is returned once. */
export function createTokenFromForm(db: Database, operator: Operator, name: string): Promise<{ token: string; info: ApiTokenInfo }> {
  const fault = checkTokenName(name);
  if (fault) throw validationProblem([{ pointer: "/name", detail: fault }], `The name ${fault}.`);
  return db.write((tx) => createApiToken(tx, name.trim(), Date.now(), null, madeByOperator(operator)));
}

/** revokeTokenFromConsole revokes an API token and forgets its rate limits, or throws 404 when there is no token with that id. */
export async function revokeTokenFromConsole(rt: Runtime, id: string): Promise<void> {
  const { db } = rt;
  if (await revokeApiToken(db, id)) {
    rt.rateLimits.forgetToken(id);
    return;
  }
  // Revoked already (the confirmation sent twice, another tab): the goal is reached all the same.
  if ((await findToken(db, id))?.revoked_at) return;
  throw new ProblemError(404, "not-found", `No API token with id ${JSON.stringify(id)} exists.`);
}

/** USERS_PER_PAGE is how many users the users page lists at once. */
const USERS_PER_PAGE = 50;

/** usersOnPage returns one page of users (page "1" when absent), or throws 422 for a parameter the users page does not take or a page that is not a number. */
export function usersOnPage(rt: Runtime, query: { page?: string; added?: string; deleted?: string; unassigned?: string } = {}): Promise<{ data: User[]; meta: ListMeta }> {
  // `added`, `deleted` and `unassigned` are written by the redirects after adding and deleting a user, which the route reads.
  const unknown = unknownParameterErrors(query, ["page", "added", "deleted", "unassigned"], "the users page");
  if (unknown.length > 0) throw fieldsProblem(unknown);
  const page = query.page;
  if (page !== undefined && !/^[1-9][0-9]{0,8}$/.test(page)) throw validationProblem([{ parameter: "page", detail: "must be a whole number from 1 to 999999999" }], "The page number must be a whole number from 1 to 999999999.");
  return listUsersPage(rt.db, rt.secrets, { per_page: String(USERS_PER_PAGE), ...(page ? { page } : {}) });
}

const checkUserInput = fieldsChecker(UserInput);

/**
 * addUserFromForm adds a user from the console's form, checked with the API's UserInput model,
 * once per form key: the form sent again gets the first sending's user, not "email taken".
 */
export async function addUserFromForm(rt: Runtime, session: ConsoleSession, form: { name: string; email: string }, formKey: string): Promise<User> {
  const input = checkUserInput(form);
  const added = onceForForm(rt, { session, path: "/console/users", key: formKey, values: input }, (scope) => createUserOnce(rt, input, scope));
  return (await refusedOnField(added, "user-exists", "email")).body.data;
}

/** userDeletedAnswer is the answer a user's delete form records: the user's id and how many contacts lost it. */
function userDeletedAnswer({ user, unassigned }: DeletedUser): { deleted: string; unassigned: number } {
  return { deleted: user.id, unassigned };
}

/**
 * deleteUserFromForm deletes a user once per form key, as the API's delete does (in short writes,
 * deleteUser, its events made by the console's request `origin`), its answer recorded in the last of them: the confirmation sent again (a double
 * click) answers as the first did, where the delete alone would be 404 by then.
 */
export async function deleteUserFromForm(rt: Runtime, session: ConsoleSession, id: string, formKey: string, origin: ChangeOrigin): Promise<{ unassigned: number }> {
  const done = await onceForForm(rt, { session, path: `/console/users/${id}/delete`, key: formKey, values: {} }, async (scope) => {
    const deleted = await deleteUser(rt.db, id, rt.unlinkChunk, origin, (tx, answer, now) => saveIdempotentResponse(tx, scope, 200, userDeletedAnswer(answer), now));
    return { status: 200, body: userDeletedAnswer(deleted) };
  });
  return { unassigned: done.body.unassigned };
}

/** contactsAssignedTo counts the contacts that deleting the user would change (each sends contact.updated). */
export function contactsAssignedTo(db: Db, userId: string): Promise<number> {
  return countContactsAssignedToUser(db, userId);
}

/** FORM_LINK_PURPOSE is the purpose the secrets key derives the key for that seals a link's code in its form's kept answer. */
const FORM_LINK_PURPOSE = "console operator link";

/**
 * linkOnceForForm makes a one-time link once per form key, with a code drawn afresh: `issue`
 * stores the link (only the code's hash), and the form's kept answer holds the code sealed, bound
 * to the operator, path and key, so the form sent again (a reload re-posts it) shows the link the
 * first sending made instead of making one that replaces the link already handed out. A sending
 * with no answer kept (its 24 hours over) draws a new code: a link used or withdrawn never works again.
 */
async function linkOnceForForm<T>(
  rt: Runtime,
  session: ConsoleSession,
  form: { path: string; key: string; values?: unknown },
  issue: (tx: Db, code: string, now: number) => Promise<T>,
): Promise<{ made: T; code: string }> {
  const binding = `${session.operator.id} ${form.path} ${form.key}`;
  const { body } = await changeOnceForForm(rt, { session, ...form }, async (tx, now) => {
    const code = randomSecret();
    return { made: await issue(tx, code, now), sealed_code: rt.secrets.sealText(FORM_LINK_PURPOSE, binding, code) };
  });
  // An answer kept by an earlier version holds no code, and one sealed under another secrets key does not open.
  const code = typeof body.sealed_code === "string" ? rt.secrets.openText(FORM_LINK_PURPOSE, binding, body.sealed_code) : null;
  if (code === null) throw new ProblemError(410, "form-link-not-kept", "This form was already sent, and the link it made cannot be shown again. Load the page again to make a new link.");
  return { made: body.made, code };
}

/** inviteFromForm makes an invitation link once per form key: sent again, the form shows the same link (with another email, 409). */
export async function inviteFromForm(rt: Runtime, session: ConsoleSession, email: string, formKey: string): Promise<{ email: string; code: string }> {
  const { made, code } = await linkOnceForForm(rt, session, { path: "/console/operators", key: formKey, values: { email } }, (tx, code, now) => issueInvite(tx, email, session.operator, code, now));
  return { email: made, code };
}

/** resetLinkFromForm makes a password-reset link once per form key: the confirmation sent again shows the same link. */
export async function resetLinkFromForm(rt: Runtime, session: ConsoleSession, id: string, formKey: string): Promise<{ operator: Operator; code: string }> {
  const { made, code } = await linkOnceForForm(rt, session, { path: `/console/operators/${id}/reset-password`, key: formKey }, (tx, code, now) => issueResetLink(tx, id, session.operator, code, now));
  return { operator: made, code };
}

/**
 * removeOperatorFromForm removes an operator once per form key, and in the same write, as chosen,
 * revokes the API tokens they made and disables the subscriptions they made or created with one
 * of those tokens (made by request `origin`); it returns how many of each. The confirmation
 * sent again (a double click) answers as the first did, where the removal alone would be 404 by then.
 */
export async function removeOperatorFromForm(rt: Runtime, session: ConsoleSession, id: string, formKey: string, choices: RemovalChoices, origin: ChangeOrigin): Promise<{ tokens: number; subscriptions: number }> {
  const form = { session, path: `/console/operators/${id}/remove`, key: formKey, values: { revoke_tokens: choices.revokeTokens, disable_subscriptions: choices.disableSubscriptions } };
  const { body, replayed } = await changeOnceForForm(rt, form, async (tx, now) => {
    const { operator, ...done } = await dropOperatorWith(tx, id, choices, origin, now, rt.deliveries.openAttemptsOf);
    return { removed: operator.id, ...done };
  });
  // An answer kept by an earlier version holds neither list.
  const revoked = body.tokens_revoked ?? [];
  const disabled = body.subscriptions_disabled ?? [];
  if (!replayed) {
    await operatorRemoved(rt.db, { tokens_revoked: revoked, subscriptions_disabled: disabled }, rt.batchRows, (error) => rt.deliveries.unsentRefused(error), rt.metrics.observePendingDeliveriesFailed, rt.deliveries.openAttemptsOf);
    for (const token of revoked) rt.rateLimits.forgetToken(token);
  }
  return { tokens: revoked.length, subscriptions: disabled.length };
}
