import { Elysia } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import type { Runtime } from "../../server/runtime.ts";
import { attemptRefusalProblem, listAllSubscriptions } from "../../server/webhooks/service.ts";
import { htmlResponse, jsonResponse, redirect } from "../http.ts";
import { DeliveryFilterQuery } from "../model.ts";
import { CONSOLE_DETAIL, flagQuery, IdParam, OptionalForm, problemOf, signedInConsole } from "../shell.ts";
import { subscriptionsHealth, worstFirst } from "../subscriptions/health.ts";
import { deliveriesPage, deliveryPage, eventPage } from "./pages.tsx";
import { deliveryWatch, deliveryWithSubscription, eventPage as eventView, LATEST_DELIVERIES, latestDeliveries, retryFromConsole, retryRefusalText, shownDeliveryFilters } from "./service.ts";

/**
 * deliveryRoutes are the start page (health at a glance and the deliveries table, paged and
 * filtered), a delivery with its attempts and Retry now, an event with its deliveries, and the two
 * JSON endpoints the live islands poll.
 */
export function deliveryRoutes(rt: Runtime) {
  const db = rt.db;
  return new Elysia({ name: "console-deliveries", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get(
      "/",
      async ({ session, query }) => {
        const subscriptions = await listAllSubscriptions(db);
        const health = worstFirst(await subscriptionsHealth(db, subscriptions));
        try {
          const view = await latestDeliveries(db, query);
          return htmlResponse(deliveriesPage({ session, view, filters: shownDeliveryFilters(query), subscriptions, health, disableAfterHours: rt.config.disableFailingAfterHours, limit: LATEST_DELIVERIES }));
        } catch (error) {
          // A wrong filter shows the page unfiltered, with the filter's problem above the table and
          // the filters as sent in their fields, to be corrected.
          const failure = problemOf(error, 422);
          const view = await latestDeliveries(db, {});
          return htmlResponse(deliveriesPage({ session, view, filters: {}, typed: shownDeliveryFilters(query), subscriptions, health, disableAfterHours: rt.config.disableFailingAfterHours, limit: LATEST_DELIVERIES, refusal: failure }), 422);
        }
      },
      { query: DeliveryFilterQuery },
    )
    .get("/api/deliveries", async ({ query }) => jsonResponse(await latestDeliveries(db, query)), { query: DeliveryFilterQuery })
    .get("/api/deliveries/:id", async ({ params }) => jsonResponse(await deliveryWatch(db, params.id)), { params: IdParam })
    .get(
      "/deliveries/:id",
      async ({ session, params, query }) => {
        const notice = query.retried ? { kind: "success" as const, text: "Retried: the newest attempt is listed first." } : null;
        return htmlResponse(deliveryPage({ session, ...(await deliveryWithSubscription(db, params.id)), notice }));
      },
      { params: IdParam, query: flagQuery("retried") },
    )
    .post(
      "/deliveries/:id/retry",
      async ({ session, params }) => {
        const refusal = await retryFromConsole(rt, params.id);
        if (refusal === null) return redirect(`${CONSOLE_PREFIX}/deliveries/${params.id}?retried=1`);
        // Its status and headers are the API's (503 with Retry-After for a busy loop, 409 for a
        // subscription that sends nothing); the words are the console's, on the delivery's page again.
        const problem = attemptRefusalProblem(params.id, refusal);
        if (refusal.refused === "not-found") throw problem;
        const view = await deliveryWithSubscription(db, params.id);
        return htmlResponse(deliveryPage({ session, ...view, notice: { kind: "error", text: retryRefusalText(refusal.refused, view) } }), problem.status, { headers: problem.headers });
      },
      { params: IdParam, body: OptionalForm },
    )
    .get("/events/:id", async ({ session, params }) => htmlResponse(eventPage({ session, ...(await eventView(db, params.id)) })), { params: IdParam });
}
