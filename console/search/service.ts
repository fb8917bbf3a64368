import type { Database } from "../../server/db/sql.ts";
import { contactsWithEmail, findContact } from "../../server/contacts/service.ts";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { isolated } from "../pages/parts.tsx";
import { findDeliverySummary, findSubscription, findWebhookEvent } from "../../server/webhooks/service.ts";

/** SearchResult is where a search leads: the page of what it names, or a sentence saying nothing matched. */
export type SearchResult = { location: string } | { nothing: string };

const ID = /^(dlv|evt|con|sub)_[0-9A-Z]{26}$/;

/**
 * search takes what an operator pastes, as a receiver's log or a colleague names it: a delivery id
 * (the webhook-id), an event id, a contact id, a subscription id, or a contact's email, and leads
 * to its page. Any other text searches the contacts by name.
 */
export async function search(db: Database, text: string): Promise<SearchResult> {
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
    const contacts = await contactsWithEmail(db, q);
    if (contacts.length === 1) return { location: `${CONSOLE_PREFIX}/contacts/${contacts[0]!.id}` };
    if (contacts.length > 1) return { location: `${CONSOLE_PREFIX}/contacts?q=${encodeURIComponent(q)}` };
    return { nothing: `No contact has the email ${isolated(q)}.` };
  }
  return { location: `${CONSOLE_PREFIX}/contacts?q=${encodeURIComponent(q)}` };
}
