import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../server/http/conventions.ts";
import { pathOf } from "../server/http/request-log.ts";
import type { Runtime } from "../server/runtime.ts";
import { problem } from "../server/shared/problem.ts";
import css from "./assets/console.css" with { type: "text" };
import { messagePage } from "./auth/pages.tsx";
import { authRoutes } from "./auth/routes.ts";
import { islandScripts } from "./bundle.ts";
import { contactRoutes } from "./contacts/routes.ts";
import { deliveryRoutes } from "./deliveries/routes.ts";
import { assetResponse, htmlResponse, problemJsonResponse } from "./http.ts";
import { peopleRoutes } from "./people/routes.ts";
import { searchRoutes } from "./search/routes.ts";
import { CONSOLE_DETAIL, consoleBase, consoleErrors, signedInConsole } from "./shell.ts";
import { rotationRoutes, subscriptionRoutes } from "./subscriptions/routes.ts";

/**
 * consoleRoutes serves the operator console under /console: one Elysia instance per feature
 * (sign-in and sessions, deliveries, subscriptions and rotation, contacts, search, people), each
 * with its routes, service and pages, on a shared base (console/shell.ts) that resolves the
 * session and checks every form's CSRF token, and one error handler (consoleErrors) that renders
 * every problem as a page. Pages need an operator session (a cookie); API tokens mean nothing
 * here, and sessions nothing on the API.
 */
export function consoleRoutes(rt: Runtime) {
  return new Elysia({ name: "console" })
    // First, so that it covers every console route as well as what is refused before routing.
    .use(consoleErrors())
    .use(
      new Elysia({ name: "console-assets", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
        .use(consoleBase(rt))
        .get("/assets/console.css", ({ request }) => assetResponse(request, css, "text/css; charset=utf-8"))
        .get(
          "/assets/:file",
          async ({ params, session, request }) => {
            const script = (await islandScripts())[params.file];
            return script === undefined ? htmlResponse(messagePage({ session, title: "Not found", text: "There is no such file." }), 404) : assetResponse(request, script, "text/javascript; charset=utf-8");
          },
          { params: t.Object({ file: t.String({ maxLength: 64 }) }) },
        ),
    )
    .use(authRoutes(rt))
    .use(deliveryRoutes(rt))
    .use(subscriptionRoutes(rt))
    .use(rotationRoutes(rt))
    .use(contactRoutes(rt))
    .use(searchRoutes(rt))
    .use(peopleRoutes(rt))
    .use(
      new Elysia({ name: "console-not-found", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
        .use(signedInConsole(rt))
        // The JSON endpoints answer problem+json, for an address that does not exist too.
        .get("/*", ({ session, request }) =>
          pathOf(request).startsWith(`${CONSOLE_PREFIX}/api/`)
            ? problemJsonResponse(problem(404, "not-found", "There is no console API endpoint at this address."))
            : htmlResponse(messagePage({ session, title: "Not found", text: "There is no console page at this address." }), 404),
        ),
    );
}
