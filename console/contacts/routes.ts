import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { fieldsChecker } from "../../server/http/schema-errors.ts";
import type { Runtime } from "../../server/runtime.ts";
import { openFields, sealedAddress, SEALED_MAX_LENGTH, secretShapeOf } from "../addresses.ts";
import { htmlResponse, redirect } from "../http.ts";
import type { ConsoleSession } from "../model.ts";
import { expiredNotice, secretNotice } from "../pages/forms.tsx";
import type { NoticeData } from "../pages/parts.tsx";
import { CONSOLE_DETAIL, field, IdParam, OptionalForm, signedInConsole } from "../shell.ts";
import { contactPage, contactsPage } from "./pages.tsx";
import { contactPage as contactView, contactsPage as contactsView, EVENTS_ON_CONTACT } from "./service.ts";

const ContactsQuery = t.Object(
  {
    q: t.Optional(t.String({ maxLength: 300 })),
    before: t.Optional(t.String({ maxLength: 100 })),
    assigned_user_id: t.Optional(t.String({ maxLength: 100 })),
    s: t.Optional(t.String({ maxLength: SEALED_MAX_LENGTH })),
  },
  { additionalProperties: true },
);

// A post is held to the limits of the page's address before it is sealed, so the address it leads to opens.
const checkPosted = fieldsChecker(ContactsQuery);

/** ContactsFilter is what the contacts page is filtered by, and where in the list it is. */
type ContactsFilter = { q?: string; before?: string; assigned_user_id?: string };

/**
 * contactRoutes are the read-only contacts pages: a search by name or email, and a contact with
 * everything sent about it. The page's filter posts what was typed, and its answer is a redirect to
 * the page with the text sealed in its address (`?s=`, sealedAddress), as the search box's is: a
 * token pasted there by mistake is in no address. The address with the text itself (`?q=`) is kept
 * for links; the other pages of a list filtered by text are at sealed addresses too.
 */
export function contactRoutes(rt: Runtime) {
  const db = rt.db;
  // A list of one user's contacts, unfiltered by text, holds nothing typed: its addresses stay plain.
  const addressOf = (session: ConsoleSession, filter: ContactsFilter): string => {
    const fields = Object.fromEntries(Object.entries(filter).filter(([, value]) => value)) as Record<string, string>;
    if (filter.q?.trim()) return sealedAddress(rt.secrets, "contacts", session, fields);
    const search = new URLSearchParams(fields).toString();
    return `${CONSOLE_PREFIX}/contacts${search ? `?${search}` : ""}`;
  };
  const listed = async (session: ConsoleSession, filter: ContactsFilter, status = 200, notice: NoticeData | null = null): Promise<Response> => {
    const view = await contactsView(db, filter, session.operator.id);
    const at = { q: view.q, ...(view.user ? { assigned_user_id: view.user.id } : {}) };
    const pages = { newest: view.older ? addressOf(session, at) : undefined, older: view.next ? addressOf(session, { ...at, before: view.next }) : undefined };
    return htmlResponse(contactsPage({ session, view, pages, notice }), status);
  };
  // A secret-shaped text is neither searched nor sealed: the page says so, its own user's contacts listed.
  const ownerOf = (filter: ContactsFilter): ContactsFilter => (filter.assigned_user_id ? { assigned_user_id: filter.assigned_user_id } : {});
  return new Elysia({ name: "console-contacts", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get(
      "/contacts",
      async ({ session, query }) => {
        if (query.s !== undefined) {
          const filter = openFields(rt.secrets, "contacts", session.csrfToken, query.s);
          return filter ? listed(session, filter) : listed(session, {}, 410, expiredNotice("search"));
        }
        const secret = secretShapeOf(query.q ?? "");
        return secret ? listed(session, ownerOf(query), 422, secretNotice(secret, true)) : listed(session, query);
      },
      { query: ContactsQuery },
    )
    .post(
      "/contacts",
      async ({ session, body }) => {
        const filter = { q: field(body, "q"), assigned_user_id: field(body, "assigned_user_id") };
        const secret = secretShapeOf(filter.q);
        return secret ? listed(session, ownerOf(filter), 422, secretNotice(secret, false)) : redirect(addressOf(session, checkPosted(filter)));
      },
      { body: OptionalForm },
    )
    .get("/contacts/:id", async ({ session, params }) => htmlResponse(contactPage({ session, view: await contactView(db, params.id), eventLimit: EVENTS_ON_CONTACT })), { params: IdParam });
}
