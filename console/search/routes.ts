import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { fieldsProblem } from "../../server/http/schema-errors.ts";
import type { Runtime } from "../../server/runtime.ts";
import { htmlResponse, redirect } from "../http.ts";
import type { ConsoleSession } from "../model.ts";
import { CONSOLE_DETAIL, field, OptionalForm, signedInConsole } from "../shell.ts";
import { searchPage, secretPage } from "./pages.tsx";
import { search, SEARCH_MAX_LENGTH, secretShapeOf } from "./service.ts";

/**
 * searchRoutes answer the search box: a redirect to what it names, or a page saying nothing matched
 * (404). The box posts what was typed, so that a token pasted into it by mistake is in no address
 * (the browser's history, a proxy's log); the search's address (GET) is kept for links.
 */
export function searchRoutes(rt: Runtime) {
  const answer = async (session: ConsoleSession, q: string, posted: boolean): Promise<Response> => {
    // Checked before the length, so a long paste that holds a token is told so too.
    const secret = secretShapeOf(q);
    if (secret) return htmlResponse(secretPage({ session, secret, inAddress: !posted }), 422);
    if (q.length > SEARCH_MAX_LENGTH) throw fieldsProblem([{ pointer: "/q", detail: `must be at most ${SEARCH_MAX_LENGTH} characters` }]);
    const result = await search(rt.db, q);
    if ("location" in result) return redirect(result.location);
    // A post that finds nothing is sent on to the search's address, which a reload repeats and a link can carry.
    return posted ? redirect(`${CONSOLE_PREFIX}/search?q=${encodeURIComponent(q)}`) : htmlResponse(searchPage({ session, q, nothing: result.nothing }), 404);
  };
  return new Elysia({ name: "console-search", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get("/search", ({ session, query }) => answer(session, query.q ?? "", false), {
      query: t.Object({ q: t.Optional(t.String({ maxLength: SEARCH_MAX_LENGTH })) }, { additionalProperties: true }),
    })
    .post("/search", ({ session, body }) => answer(session, field(body, "q"), true), { body: OptionalForm });
}
