import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { originOf } from "../../server/http/request-log.ts";
import { fieldsChecker } from "../../server/http/schema-errors.ts";
import type { Runtime } from "../../server/runtime.ts";
import type { Erasure } from "../../server/tombstones/model.ts";
import { refuseUnerasable, type ErasableResource } from "../../server/tombstones/service.ts";
import { openFields, sealedAddress, SEALED_MAX_LENGTH, secretShapeOf } from "../addresses.ts";
import { htmlResponse, redirect } from "../http.ts";
import type { ConsoleSession } from "../model.ts";
import { expiredNotice, secretNotice } from "../pages/forms.tsx";
import type { NoticeData } from "../pages/parts.tsx";
import { CONSOLE_DETAIL, countOf, field, IdParam, OptionalForm, signedInConsole } from "../shell.ts";
import { accountPage, contactPage, contactsPage, deleteContactPage, eraseRecordPage } from "./pages.tsx";
import {
  accountPage as accountView,
  contactPage as contactView,
  contactsPage as contactsView,
  contactToDelete,
  deleteContactFromForm,
  eraseFromForm,
  EVENTS_ON_CONTACT,
} from "./service.ts";

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

/** ErasedQuery carries what an erasure from the console did, as its redirect writes it (erasedNotice). */
const ErasedQuery = t.Object({ erased: t.Optional(t.String({ maxLength: 10 })), failed: t.Optional(t.String({ maxLength: 10 })) }, { additionalProperties: true });

/** erasedAddress is the page of a contact or account after its erasure, with what it did. */
const erasedAddress = (resource: ErasableResource, erasure: Erasure) => `${CONSOLE_PREFIX}/${resource}s/${erasure.id}?erased=${erasure.events_erased}&failed=${erasure.deliveries_failed}`;

/** erasedNotice says what an erasure did, as its redirect wrote it (nothing for a hand-made value), in the words of `crm contact erase`. */
function erasedNotice(query: { erased?: string; failed?: string }): NoticeData | null {
  const [erased, failed] = [countOf(query.erased), countOf(query.failed)];
  if (erased === null || failed === null) return null;
  const events = erased === 1 ? "1 earlier event" : `${erased} earlier events`;
  const pending = failed === 1 ? "1 pending delivery" : `${failed} pending deliveries`;
  return { kind: "success", text: `Erased the payloads of ${events}; ${pending} of them failed unsent.` };
}

/** ContactsFilter is what the contacts page is filtered by, and where in the list it is. */
type ContactsFilter = { q?: string; before?: string; assigned_user_id?: string };

/**
 * contactRoutes are the contacts pages: a search by name or email, a contact (or an account) with
 * everything sent about it, for a live contact its delete and, for a deleted one, the erasure of its
 * earlier events (each asked first, once per form key, through the API's delete and erasure). The page's filter posts what was typed, and its answer is a redirect to
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
  // Refused as the erasure would be (409 while the record exists, 404 for an id unknown) before it is asked for.
  const askErase = async (session: ConsoleSession, resource: ErasableResource, id: string): Promise<Response> => {
    await refuseUnerasable(db, resource, id);
    return htmlResponse(eraseRecordPage({ session, resource, id }));
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
    .get(
      "/contacts/:id",
      async ({ session, params, query }) => htmlResponse(contactPage({ session, view: await contactView(db, params.id), eventLimit: EVENTS_ON_CONTACT, notice: erasedNotice(query) })),
      { params: IdParam, query: ErasedQuery },
    )
    .get(
      "/accounts/:id",
      async ({ session, params, query }) => htmlResponse(accountPage({ session, view: await accountView(db, params.id), eventLimit: EVENTS_ON_CONTACT, notice: erasedNotice(query) })),
      { params: IdParam, query: ErasedQuery },
    )
    // Once deleted, the contact's page is where its delete leads: it says so and offers Erase.
    .get(
      "/contacts/:id/delete",
      async ({ session, params }) => {
        const contact = await contactToDelete(db, params.id);
        return contact ? htmlResponse(deleteContactPage({ session, contact })) : redirect(`${CONSOLE_PREFIX}/contacts/${params.id}`);
      },
      { params: IdParam },
    )
    .post(
      "/contacts/:id/delete",
      async ({ request, session, params, body }) => {
        await deleteContactFromForm(rt, session, params.id, field(body, "form_key"), originOf(request));
        return redirect(`${CONSOLE_PREFIX}/contacts/${params.id}`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .get("/contacts/:id/erase", ({ session, params }) => askErase(session, "contact", params.id), { params: IdParam })
    .get("/accounts/:id/erase", ({ session, params }) => askErase(session, "account", params.id), { params: IdParam })
    .post("/contacts/:id/erase", async ({ session, params, body }) => redirect(erasedAddress("contact", await eraseFromForm(rt, session, "contact", params.id, field(body, "form_key")))), {
      params: IdParam,
      body: OptionalForm,
    })
    .post("/accounts/:id/erase", async ({ session, params, body }) => redirect(erasedAddress("account", await eraseFromForm(rt, session, "account", params.id, field(body, "form_key")))), {
      params: IdParam,
      body: OptionalForm,
    });
}
