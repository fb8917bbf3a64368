import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import type { Runtime } from "../../server/runtime.ts";
import { htmlResponse } from "../http.ts";
import { CONSOLE_DETAIL, IdParam, signedInConsole } from "../shell.ts";
import { contactPage, contactsPage } from "./pages.tsx";
import { contactPage as contactView, contactsPage as contactsView, EVENTS_ON_CONTACT } from "./service.ts";

const ContactsQuery = t.Object(
  { q: t.Optional(t.String({ maxLength: 300 })), before: t.Optional(t.String({ maxLength: 100 })), assigned_user_id: t.Optional(t.String({ maxLength: 100 })) },
  { additionalProperties: true },
);

/** contactRoutes are the read-only contacts pages: a search by name or email, and a contact with everything sent about it. */
export function contactRoutes(rt: Runtime) {
  const db = rt.db;
  return new Elysia({ name: "console-contacts", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get("/contacts", async ({ session, query }) => htmlResponse(contactsPage({ session, view: await contactsView(db, query, session.operator.id) })), { query: ContactsQuery })
    .get("/contacts/:id", async ({ session, params }) => htmlResponse(contactPage({ session, view: await contactView(db, params.id), eventLimit: EVENTS_ON_CONTACT })), { params: IdParam });
}
