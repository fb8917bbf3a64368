import { Elysia } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import type { Runtime } from "../../server/runtime.ts";
import { attemptRefusalProblem, listAllSubscriptions } from "../../server/webhooks/service.ts";
import { fieldsChecker, fieldsProblem } from "../../server/http/schema-errors.ts";
import { ProblemError } from "../../server/shared/problem.ts";
import { openFields, sealedAddress, secretFieldOf } from "../addresses.ts";
import { htmlResponse, jsonResponse, redirect } from "../http.ts";
import { DeliveryFilterQuery, type ConsoleSession, type DeliveryFilters } from "../model.ts";
import { expiredNotice, secretReason } from "../pages/forms.tsx";
import { CONSOLE_DETAIL, field, flagQuery, IdParam, OptionalForm, problemOf, signedInConsole } from "../shell.ts";
import { subscriptionsHealth, worstFirst } from "../subscriptions/health.ts";
import { deliveriesPage, deliveryPage, eventPage, plainDeliveriesAddress, setFilters } from "./pages.tsx";
import { deliveryFiltersAccepted, deliveryWatch, deliveryWithSubscription, eventPage as eventView, LATEST_DELIVERIES, latestDeliveries, retryFromConsole, retryRefusalText, shownDeliveryFilters, unknownDeliveryFilters } from "./service.ts";

// A post is held to the limits of the page's address before it is sealed, so the address it leads to opens.
const checkPosted = fieldsChecker(DeliveryFilterQuery);

/**
 * deliveryRoutes are the start page (health at a glance and the deliveries table, paged and
 * filtered), a delivery with its attempts and Retry now, an event with its deliveries, and the two
 * JSON endpoints the live islands poll. The filters' form posts what was typed: filters the page
 * takes are a redirect to their plain address (links, the older pages, the live table's polling
 * all carry them), or sealed when they hold a request id; anything else to the page with them
 * sealed (`?s=`, sealedAddress), so that text pasted into a field by mistake is in no address, and
 * a secret-shaped one is not kept at all.
 */
export function deliveryRoutes(rt: Runtime) {
  const db = rt.db;
  // A request id is text a client chose, typed or pasted into its field (a password of its characters
  // too): its pages' addresses are sealed, as the search's are. The other filters hold only ids,
  // statuses, event types and times.
  const addressOf = (session: ConsoleSession, filters: DeliveryFilters): string =>
    filters.request_id ? sealedAddress(rt.secrets, "deliveries", session, setFilters(filters)) : plainDeliveriesAddress(filters);
  /** shownDelivery is a delivery with every attempt and its subscription, and the sealed address of the deliveries of the request that made its event (addressOf). */
  const shownDelivery = async (session: ConsoleSession, id: string) => {
    const view = await deliveryWithSubscription(db, id);
    const requestId = view.delivery.request_id;
    return { ...view, requestDeliveries: requestId ? addressOf(session, { request_id: requestId }) : null };
  };
  /** opened are the filters of a sealed address (`s`), null when it no longer opens, or the query itself when it has none. */
  const opened = (session: ConsoleSession, query: DeliveryFilters): DeliveryFilters | null =>
    query.s === undefined ? query : openFields(rt.secrets, "deliveries", session.csrfToken, query.s);
  /**
   * page answers the start page filtered by `query`. A wrong filter, or one refused before it was
   * read (`refused`), shows the page unfiltered, with the problem above the table and the filters
   * as sent (`typed`) in their fields, to be corrected; `expired`, unfiltered, says the filters'
   * sealed address no longer opens (410).
   */
  const page = async (session: ConsoleSession, query: DeliveryFilters, answer: { refused?: ProblemError; typed?: DeliveryFilters; expired?: boolean } = {}): Promise<Response> => {
    const subscriptions = await listAllSubscriptions(db);
    const health = worstFirst(await subscriptionsHealth(db, subscriptions));
    const shown = { session, subscriptions, health, disableAfterHours: rt.config.disableFailingAfterHours, limit: LATEST_DELIVERIES, addressOf: (filters: DeliveryFilters) => addressOf(session, filters) };
    if (answer.expired) return htmlResponse(deliveriesPage({ ...shown, view: await latestDeliveries(db, {}), filters: {}, notice: expiredNotice("filter") }), 410);
    let refusal = answer.refused;
    if (!refusal) {
      try {
        return htmlResponse(deliveriesPage({ ...shown, view: await latestDeliveries(db, query), filters: shownDeliveryFilters(query) }));
      } catch (error) {
        refusal = problemOf(error, 422);
      }
    }
    const view = await latestDeliveries(db, {});
    return htmlResponse(deliveriesPage({ ...shown, view, filters: {}, typed: shownDeliveryFilters(answer.typed ?? query), refusal }), 422);
  };
  return new Elysia({ name: "console-deliveries", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get(
      "/",
      async ({ session, query }) => {
        const filters = opened(session, query);
        return filters ? page(session, filters) : page(session, {}, { expired: true });
      },
      { query: DeliveryFilterQuery },
    )
    .post(
      "/",
      async ({ session, body }) => {
        const typed = Object.fromEntries(Object.keys(body ?? {}).flatMap((name) => (name === "_csrf" || field(body, name) === "" ? [] : [[name, field(body, name)]]))) as Record<string, string>;
        const secret = secretFieldOf(typed);
        // Neither used nor sealed: the page says so, its field emptied, the deliveries unfiltered.
        if (secret) return page(session, {}, { refused: fieldsProblem([{ parameter: secret.name, detail: secretReason(secret.secret) }]), typed: { ...typed, [secret.name]: "" } });
        // A field the page has no filter of is refused by name now, as its address would be, not
        // sealed: the page's schema does not bound it, and its seal could outgrow any address.
        if (unknownDeliveryFilters(typed).length > 0) return page(session, typed);
        // Filters the page takes are at their page's address (plain but for a request id); others are sealed, to be refused by name.
        return redirect(deliveryFiltersAccepted(typed) ? addressOf(session, typed) : sealedAddress(rt.secrets, "deliveries", session, checkPosted(typed)));
      },
      { body: OptionalForm },
    )
    .get(
      "/api/deliveries",
      async ({ session, query }) => {
        // The live table refreshes at its page's address: sealed, its hour past, it stops.
        const filters = opened(session, query);
        if (!filters) throw new ProblemError(410, "filters-expired", expiredNotice("filter").text);
        return jsonResponse(await latestDeliveries(db, filters));
      },
      { query: DeliveryFilterQuery },
    )
    .get("/api/deliveries/:id", async ({ params }) => jsonResponse(await deliveryWatch(db, params.id)), { params: IdParam })
    .get(
      "/deliveries/:id",
      async ({ session, params, query }) => {
        const notice = query.retried ? { kind: "success" as const, text: "Retried: the newest attempt is listed first." } : null;
        return htmlResponse(deliveryPage({ session, ...(await shownDelivery(session, params.id)), notice }));
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
        const view = await shownDelivery(session, params.id);
        return htmlResponse(deliveryPage({ session, ...view, notice: { kind: "error", text: retryRefusalText(refusal, view) } }), problem.status, { headers: problem.headers });
      },
      { params: IdParam, body: OptionalForm },
    )
    .get(
      "/events/:id",
      async ({ session, params }) => {
        const view = await eventView(db, params.id);
        const requestId = view.event.request_id;
        return htmlResponse(eventPage({ session, ...view, requestDeliveries: requestId ? addressOf(session, { request_id: requestId }) : null }));
      },
      { params: IdParam },
    );
}
