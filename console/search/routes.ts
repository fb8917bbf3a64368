import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import type { Runtime } from "../../server/runtime.ts";
import { htmlResponse, redirect } from "../http.ts";
import { CONSOLE_DETAIL, signedInConsole } from "../shell.ts";
import { searchPage } from "./pages.tsx";
import { search } from "./service.ts";

/** searchRoutes answer the search box: a redirect to what it names, or a page saying nothing matched (404). */
export function searchRoutes(rt: Runtime) {
  return new Elysia({ name: "console-search", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL }).use(signedInConsole(rt)).get(
    "/search",
    async ({ session, query }) => {
      const q = query.q ?? "";
      const result = await search(rt.db, q);
      return "location" in result ? redirect(result.location) : htmlResponse(searchPage({ session, q, nothing: result.nothing }), 404);
    },
    { query: t.Object({ q: t.Optional(t.String({ maxLength: 300 })) }, { additionalProperties: true }) },
  );
}
