import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { fieldsProblem } from "../../server/http/schema-errors.ts";
import type { Runtime } from "../../server/runtime.ts";
import { openFields, sealedAddress, SEALED_MAX_LENGTH, secretShapeOf } from "../addresses.ts";
import { htmlResponse, redirect } from "../http.ts";
import type { ConsoleSession } from "../model.ts";
import { CONSOLE_DETAIL, field, OptionalForm, signedInConsole } from "../shell.ts";
import { expiredSearchPage, searchPage, searchResultsPage, secretPage } from "./pages.tsx";
import { search, searchLead, SEARCH_MAX_LENGTH, type SearchAt } from "./service.ts";

/**
 * searchRoutes answer the search box: a redirect to the page of the record it names, or to the
 * search's own address, whose answer lists the contacts it matched or says nothing did (404). The
 * box posts what was typed, and the search's address holds it sealed (`?s=`, sealedAddress), so that
 * text pasted into it by mistake (a token, a password) is in no address (the browser's history, a
 * proxy's log); the answer to a GET, not to the post, Back and Reload show it again. The address
 * with the text itself (`?q=`) is kept for links.
 */
export function searchRoutes(rt: Runtime) {
  const addressOf = (session: ConsoleSession, at: SearchAt) => sealedAddress(rt.secrets, "search", session, { q: at.q, ...(at.before ? { before: at.before } : {}) });
  // Checked before the length, so a long paste that holds a token is told so too.
  const refusal = (session: ConsoleSession, q: string, inAddress: boolean): Response | null => {
    const secret = secretShapeOf(q);
    if (secret) return htmlResponse(secretPage({ session, secret, inAddress }), 422);
    if (q.length > SEARCH_MAX_LENGTH) throw fieldsProblem([{ pointer: "/q", detail: `must be at most ${SEARCH_MAX_LENGTH} characters` }]);
    return null;
  };
  const answer = async (session: ConsoleSession, at: SearchAt): Promise<Response> => {
    const result = await search(rt.db, at.q, session.operator.id, at.before);
    if ("location" in result) return redirect(result.location);
    if ("contacts" in result) {
      const { next, older } = result.contacts;
      const pages = { newest: older ? addressOf(session, { q: at.q }) : undefined, older: next ? addressOf(session, { q: at.q, before: next }) : undefined };
      return htmlResponse(searchResultsPage({ session, q: at.q, view: result.contacts, deleted: result.deleted, pages }));
    }
    return htmlResponse(searchPage({ session, q: at.q, nothing: result.nothing }), 404);
  };
  return new Elysia({ name: "console-search", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get(
      "/search",
      ({ session, query }) => {
        if (query.s !== undefined) {
          const at = openFields(rt.secrets, "search", session.csrfToken, query.s);
          return at ? answer(session, { q: at.q ?? "", ...(at.before ? { before: at.before } : {}) }) : htmlResponse(expiredSearchPage({ session }), 410);
        }
        const q = query.q ?? "";
        return refusal(session, q, true) ?? answer(session, { q });
      },
      {
        query: t.Object({ q: t.Optional(t.String({ maxLength: SEARCH_MAX_LENGTH })), s: t.Optional(t.String({ maxLength: SEALED_MAX_LENGTH })) }, { additionalProperties: true }),
      },
    )
    .post(
      "/search",
      async ({ session, body }) => {
        const q = field(body, "q");
        const refused = refusal(session, q, false);
        if (refused) return refused;
        const lead = await searchLead(rt.db, q);
        return redirect("location" in lead ? lead.location : addressOf(session, { q }));
      },
      { body: OptionalForm },
    );
}
