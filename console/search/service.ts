import type { Database, ReaderName } from "../../server/db/sql.ts";
import { contactsWithEmail, findContact } from "../../server/contacts/service.ts";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { contactsPage, type ContactsView } from "../contacts/service.ts";
import { bidiBalanced, isolated } from "../pages/parts.tsx";
import { findDeliverySummary, findSubscription, findWebhookEvent } from "../../server/webhooks/service.ts";

/** SearchResult is where a search leads: the page of what it names, the contacts it lists (a name, an email several share), or a sentence saying nothing matched. */
export type SearchResult = { location: string } | { contacts: ContactsView } | { nothing: string };

/** SEARCH_MAX_LENGTH bounds what the search box takes, in characters. */
export const SEARCH_MAX_LENGTH = 300;

const ID = /^(dlv|evt|con|sub)_[0-9A-Z]{26}$/;

/** SecretShape is which of the service's own secrets a text looks like. */
export type SecretShape = "api-token" | "signing-secret";

// The shapes minted in server/auth/service.ts (crm_ and 40 letters and digits) and
// server/webhooks/service.ts (whsec_ and 32 bytes in base64), matched a few characters short too
// (a paste that lost its end) and anywhere in the text (a header or a config line pasted whole).
// Narrower than the request log's SECRET_SHAPED, which costs nothing when it errs: here a false
// match refuses a search, and an email such as crm_team@example.com must still be found.
const API_TOKEN = /crm_[A-Za-z0-9]{32}/;
const SIGNING_SECRET = /whsec_[A-Za-z0-9+/]{24}/;

/** secretShapeOf tells whether a text holds something shaped like an API token or a webhook signing secret, which the search box must not search, log or put in an address. */
export function secretShapeOf(text: string): SecretShape | null {
  return API_TOKEN.test(text) ? "api-token" : SIGNING_SECRET.test(text) ? "signing-secret" : null;
}

/**
 * search takes what an operator pastes, as a receiver's log or a colleague names it: a delivery id
 * (the webhook-id), an event id, a contact id, a subscription id, or a contact's email, and leads
 * to its page. Any other text searches the contacts by name, as `reader` on the read lane, listing
 * the page after `before`. Only a found record's page is a location: the text is in none.
 */
export async function search(db: Database, text: string, reader: ReaderName, before?: string): Promise<SearchResult> {
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
    if (contacts.length > 1) return { contacts: await contactsPage(db, { q, ...(before ? { before } : {}) }, reader) };
    return { nothing: `No contact has the email ${isolated(q)}.` };
  }
  const view = await contactsPage(db, { q, ...(before ? { before } : {}) }, reader);
  return view.total > 0 ? { contacts: view } : { nothing: `No contact's name contains “${bidiBalanced(q)}”.` };
}
