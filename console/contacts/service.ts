import type { Database, ReaderName } from "../../server/db/sql.ts";
import type { Account } from "../../server/accounts/model.ts";
import { findAccount } from "../../server/accounts/service.ts";
import type { Contact } from "../../server/contacts/model.ts";
import { deleteContact, findContact, searchContacts } from "../../server/contacts/service.ts";
import { unknownParameterErrors } from "../../server/http/list-query.ts";
import { fieldsProblem } from "../../server/http/schema-errors.ts";
import { MAX_EMAIL_LENGTH } from "../../server/limits/limits.ts";
import { saveIdempotentResponse } from "../../server/idempotency/service.ts";
import { madeByOperator, type ChangeOrigin } from "../../server/shared/made-by.ts";
import { notFound, ProblemError, validationProblem } from "../../server/shared/problem.ts";
import type { User } from "../../server/users/model.ts";
import { getUser } from "../../server/users/service.ts";
import type { Runtime } from "../../server/runtime.ts";
import type { Erasure } from "../../server/tombstones/model.ts";
import { eraseDeletedRecord, type ErasableResource } from "../../server/tombstones/service.ts";
import { eventsAbout, type WebhookEvent } from "../../server/webhooks/service.ts";
import { subscriptionNames } from "../deliveries/service.ts";
import type { ConsoleSession, SubscriptionNames } from "../model.ts";
import { onceForForm, positionOf, positionText } from "../shell.ts";

/** CONTACTS_PER_PAGE is how many contacts the contacts page lists at once. */
const CONTACTS_PER_PAGE = 50;
/** EVENTS_ON_CONTACT is how many of the latest events about a contact its page lists. */
export const EVENTS_ON_CONTACT = 100;

/** ContactsView is one page of the contacts page. */
export interface ContactsView {
  q: string;
  /** what the search matched on */
  by: "all" | "email" | "name";
  /** the user whose contacts (by assigned_user_id, as the API's filter) are listed, or null for anyone's */
  user: User | null;
  contacts: Contact[];
  total: number;
  /** the `before` of the next (older) page, or null on the last */
  next: string | null;
  older: boolean;
}

/**
 * contactsPage searches contacts newest first: a query with "@" is an exact email (any case), any
 * other text a part of the name, `assigned_user_id` those a user owns (404 for an unknown user);
 * `before` continues after a previous page. Throws 422 for a
 * parameter the page does not take, a malformed position or an overlong query; a name search
 * takes its turn on the read lane as `reader` (the operator), and 503 when the lane is full.
 */
export async function contactsPage(db: Database, query: { q?: string; before?: string; assigned_user_id?: string }, reader: ReaderName): Promise<ContactsView> {
  const unknown = unknownParameterErrors(query, ["q", "before", "assigned_user_id"], "the contacts page");
  if (unknown.length > 0) throw fieldsProblem(unknown);
  const q = (query.q ?? "").trim();
  const before = query.before ? positionOf(query.before, "con") : null;
  if (query.before && !before) throw validationProblem([{ parameter: "before", detail: "must be the position a previous page gave" }], "The page position is invalid.");
  if (q.length > MAX_EMAIL_LENGTH) throw validationProblem([{ parameter: "q", detail: `must be at most ${MAX_EMAIL_LENGTH} characters` }], `The search must be at most ${MAX_EMAIL_LENGTH} characters.`);
  const by = q === "" ? "all" : q.includes("@") ? "email" : "name";
  const user = query.assigned_user_id === undefined ? null : await getUser(db, query.assigned_user_id);
  const filters = { ...(by === "email" ? { email: q.toLowerCase() } : by === "name" ? { fullName: q.normalize("NFC") } : {}), ...(user ? { assignedUserId: user.id } : {}) };
  const page = await searchContacts(db, filters, before, CONTACTS_PER_PAGE, reader);
  return { q, by, user, contacts: page.data, total: page.total, next: page.next ? positionText(page.next) : null, older: before !== null };
}

/** RecordPageView is a contact or an account (`record`, null once deleted) and the latest events about it, each with its deliveries. */
export interface RecordPageView<R> {
  id: string;
  record: R | null;
  events: WebhookEvent[];
  subscriptions: SubscriptionNames;
}
export type ContactPageView = RecordPageView<Contact>;
export type AccountPageView = RecordPageView<Account>;

/**
 * recordPage returns a contact or an account (`find`, by its kind's id `prefix`) and what was sent
 * about it; a deleted one still shows its events. Throws 404 when neither exists, and for another
 * kind's id: the events about an account or a user would be shown as a deleted contact's,
 * offering an Erase the erasure refuses.
 */
async function recordPage<R>(db: Database, resource: ErasableResource, prefix: string, find: (db: Database, id: string) => Promise<R | null>, id: string): Promise<RecordPageView<R>> {
  if (!id.startsWith(prefix)) throw notFound(resource, id);
  const record = await find(db, id);
  const events = await eventsAbout(db, id, EVENTS_ON_CONTACT);
  if (!record && events.length === 0) throw notFound(resource, id);
  return { id, record, events, subscriptions: await subscriptionNames(db) };
}

/** contactPage returns a contact with its accounts and assigned users and what was sent about it (recordPage). */
export function contactPage(db: Database, id: string): Promise<ContactPageView> {
  return recordPage(db, "contact", "con_", findContact, id);
}

/** accountPage returns an account and what was sent about it (recordPage). */
export function accountPage(db: Database, id: string): Promise<AccountPageView> {
  return recordPage(db, "account", "acc_", findAccount, id);
}

/**
 * eraseFromForm erases a deleted contact's or account's earlier events once per form key, through
 * the API's erasure (eraseDeletedRecord, in its short writes): the confirmation sent again (a double
 * click) answers as the first did.
 */
export async function eraseFromForm(rt: Runtime, session: ConsoleSession, resource: ErasableResource, id: string, formKey: string): Promise<Erasure> {
  const done = await onceForForm(rt, { session, path: `/console/${resource}s/${id}/erase`, key: formKey, values: {} }, (scope) => eraseDeletedRecord(rt.db, resource, id, rt.batchRows, scope, madeByOperator(session.operator)));
  return done.body.data;
}

/** contactToDelete returns the live contact a delete's confirmation names, or null once it is deleted (its page says so and offers Erase); throws 404 as contactPage does. */
export async function contactToDelete(db: Database, id: string): Promise<Contact | null> {
  return (await contactPage(db, id)).record;
}

/**
 * deleteContactFromForm deletes a contact once per form key, through the API's delete (deleteContact,
 * so its subscribers are sent contact.deleted, made by the console's request `origin`), its answer
 * recorded in the delete's commit: the confirmation sent again (a double click) answers as the first
 * did. One that finds the contact deleted already (another tab's, the API's) is done too: what it asked for holds.
 */
export async function deleteContactFromForm(rt: Runtime, session: ConsoleSession, id: string, formKey: string, origin: ChangeOrigin): Promise<void> {
  const done = { status: 200, body: { deleted: id } };
  await onceForForm(rt, { session, path: `/console/contacts/${id}/delete`, key: formKey, values: {} }, async (scope) => {
    try {
      await deleteContact(rt, id, null, origin, (tx, now) => saveIdempotentResponse(tx, scope, done.status, done.body, now));
    } catch (error) {
      if (!(error instanceof ProblemError && error.status === 404)) throw error;
      if ((await contactToDelete(rt.db, id)) !== null) throw error;
    }
    return done;
  });
}
