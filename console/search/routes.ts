import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { fieldsProblem } from "../../server/http/schema-errors.ts";
import type { Runtime } from "../../server/runtime.ts";
import { htmlResponse, redirect } from "../http.ts";
import type { ConsoleSession } from "../model.ts";
import { CONSOLE_DETAIL, field, OptionalForm, signedInConsole } from "../shell.ts";
import { searchPage, searchResultsPage, secretPage } from "./pages.tsx";
import { search, SEARCH_MAX_LENGTH, secretShapeOf } from "./service.ts";

/**
 * searchRoutes answer the search box: a redirect to the page of the record it names, the contacts it
 * lists, or a page saying nothing matched (404). The box posts what was typed and only a found
 * record's page (its id) is redirected to, so that text pasted into it by mistake (a token, a
 * password) is in no address (the browser's history, a proxy's log); the search's address (GET) is
 * kept for links.
 */
export function searchRoutes(rt: Runtime) {
  const answer = async (session: ConsoleSession, q: string, posted: boolean, before?: string): Promise<Response> => {
    // Checked before the length, so a long paste that holds a token is told so too.
    const secret = secretShapeOf(q);
    if (secret) return htmlResponse(secretPage({ session, secret, inAddress: !posted }), 422);
    if (q.length > SEARCH_MAX_LENGTH) throw fieldsProblem([{ pointer: "/q", detail: `must be at most ${SEARCH_MAX_LENGTH} characters` }]);
    const result = await search(rt.db, q, session.operator.id, before);
    if ("location" in result) return redirect(result.location);
    if ("contacts" in result) return htmlResponse(searchResultsPage({ session, q, view: result.contacts }));
    return htmlResponse(searchPage({ session, q, nothing: result.nothing }), 404);
  };
  return new Elysia({ name: "console-search", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get("/search", ({ session, query }) => answer(session, query.q ?? "", false), {
      query: t.Object({ q: t.Optional(t.String({ maxLength: SEARCH_MAX_LENGTH })) }, { additionalProperties: true }),
    })
    .post("/search", ({ session, body }) => answer(session, field(body, "q"), true, field(body, "before") || undefined), { body: OptionalForm });
}
