import type { Database, ReaderName } from "../../server/db/sql.ts";
import { contactsWithEmail, deletedContactsWithEmail, findContact, type DeletedContact } from "../../server/contacts/service.ts";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { contactsPage, type ContactsView } from "../contacts/service.ts";
import { bidiBalanced, isolated } from "../pages/parts.tsx";
import { findDeliverySummary, findSubscription, findWebhookEvent } from "../../server/webhooks/service.ts";

/** SearchResult is where a search leads: the page of what it names, the contacts it lists (a name, an email several share, the deleted ones apart), or a sentence saying nothing matched. */
export type SearchResult = { location: string } | { contacts: ContactsView; deleted: DeletedContact[] } | { nothing: string };

/** SEARCH_MAX_LENGTH bounds what the search box takes, in characters. */
export const SEARCH_MAX_LENGTH = 300;

const ID = /^(dlv|evt|con|sub)_[0-9A-Z]{26}$/;

/** DELETED_LISTED is how many deleted contacts an email's list names. */
const DELETED_LISTED = 50;

/** SearchLead is where a search's text leads before a list is read: the page of what it names, a sentence saying nothing matched, or the contacts to list (`nothing`: what to say if none are). */
export type SearchLead = { location: string } | { nothing: string } | { list: { nothing: string } };

/**
 * searchLead takes what an operator pastes, as a receiver's log or a colleague names it: a delivery
 * id (the webhook-id), an event id, a contact id, a subscription id, or a contact's email, and
 * leads to its page. A deleted contact is found by its id, and by the email it had when deleted
 * while its tombstone keeps it, until its events are erased (its page offers Erase). An email
 * several contacts share, or any other text (a name), leads to a list of contacts, read by search.
 * Only a found record's page is a location: the text is in none.
 */
export async function searchLead(db: Database, text: string): Promise<SearchLead> {
  const q = text.trim();
  if (q === "") return { nothing: "Type a delivery id (dlv_…), an event id (evt_…), a contact id (con_…), an email or a name." };
  const id = ID.exec(q.toUpperCase().replace(/^(DLV|EVT|CON|SUB)_/, (prefix) => prefix.toLowerCase()));
  if (id) {
    const normalised = id[0];
    const [found, page] =
      id[1] === "dlv"
        ? [await findDeliverySummary(db, normalised), "deliveries"]
        : id[1] === "evt"
          ? [await findWebhookEvent(db, normalised), "events"]
          : id[1] === "con"
            ? [await findContact(db, normalised), "contacts"]
            : [await findSubscription(db, normalised), "subscriptions"];
    // A deleted contact's page still lists what was sent about it.
    if (found || id[1] === "con") return { location: `${CONSOLE_PREFIX}/${page}/${normalised}` };
    return { nothing: `Nothing has the id ${normalised}: it may have been deleted, or pruned by the retention of delivery history.` };
  }
  if (q.includes("@")) {
    const found = [...(await contactsWithEmail(db, q)), ...(await deletedContactsWithEmail(db, q, DELETED_LISTED))];
    if (found.length === 1) return { location: `${CONSOLE_PREFIX}/contacts/${found[0]!.id}` };
    const nothing = `No contact has the email ${isolated(q)}.`;
    return found.length > 1 ? { list: { nothing } } : { nothing };
  }
  return { list: { nothing: `No contact's name contains “${bidiBalanced(q)}”.` } };
}

/** search is where a search leads (searchLead), its list read as `reader` on the read lane: the page after `before`, and an email's deleted contacts on the first. */
export async function search(db: Database, text: string, reader: ReaderName, before?: string): Promise<SearchResult> {
  const lead = await searchLead(db, text);
  if (!("list" in lead)) return lead;
  const q = text.trim();
  const view = await contactsPage(db, { q, ...(before ? { before } : {}) }, reader);
  const deleted = view.by === "email" && !before ? await deletedContactsWithEmail(db, q, DELETED_LISTED) : [];
  return view.total > 0 || deleted.length > 0 ? { contacts: view, deleted } : { nothing: lead.list.nothing };
}

/** SearchAt is a search as its address carries it, sealed: the text typed and the page position (`before`). */
export interface SearchAt {
  q: string;
  before?: string;
}
