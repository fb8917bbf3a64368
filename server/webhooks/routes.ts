import { Elysia, t } from "elysia";
import { refuseListWhileAnswersUnread } from "../limits/routes.ts";
import { bearerAuth } from "../auth/routes.ts";
import { fingerprintSentBody, idempotentPost } from "../http/idempotent.ts";
import { IdempotencyKeyHeader, secured } from "../http/openapi-docs.ts";
import { makerOf, originOf, requestIdOf } from "../http/request-log.ts";
import { unversionedWrites } from "../http/preconditions.ts";
import { problemResponses } from "../shared/problem.ts";
import type { Runtime } from "../runtime.ts";
import {
  DeliveryDetailEnvelope,
  DeliveryEnvelope,
  DeliveryListEnvelope,
  DeliveryListQuery,
  EventTypeListEnvelope,
  RecoveryEnvelope,
  RecoveryInput,
  SecretRotationInput,
  SubscriptionEnvelope,
  SubscriptionInput,
  SubscriptionUpdate,
  SubscriptionListEnvelope,
  SubscriptionListQuery,
  SubscriptionStatsEnvelope,
  TestEventEnvelope,
} from "./model.ts";
import {
  createSubscription,
  deleteSubscription,
  enableSubscription,
  eventTypes,
  getDelivery,
  getSubscription,
  getSubscriptionStats,
  listDeliveriesPage,
  listSubscriptionsPage,
  openReplayedSecret,
  pauseSubscription,
  recoverDeliveries,
  retryDelivery,
  rotateSecret,
  sendTestEvent,
  updateSubscription,
} from "./service.ts";
import { MAX_MANUAL_ATTEMPTS, MAX_PER_SUBSCRIPTION } from "./worker.ts";

// Path parameters are named as in the contract (DELETE /webhook-subscriptions/:subscriptionId).
const SubscriptionId = t.Object({ subscriptionId: t.String({ maxLength: 64, description: "Subscription id (sub_...)" }) });
const DeliveryId = t.Object({ deliveryId: t.String({ maxLength: 64, description: "Delivery id (dlv_...), the webhook-id header receivers saw" }) });
const subscriptionTags = ["Webhook subscriptions"];
const deliveryTags = ["Webhook deliveries"];
const eventTypeTags = ["Webhook event types"];

/** webhookRoutes serves /public/v1/webhook-subscriptions and /public/v1/webhook-deliveries. */
export function webhookRoutes(rt: Runtime) {
  return new Elysia({ name: "webhooks", prefix: "/public/v1" })
    .use(bearerAuth())
    .use(
      unversionedWrites("Webhook subscriptions and deliveries", {
        subscriptionId: { kind: "webhook subscription", lookup: (id) => getSubscription(rt.db, id) },
        deliveryId: { kind: "webhook delivery", lookup: (id) => getDelivery(rt.db, id) },
      }),
    )
    .post("/webhook-subscriptions", ({ request, headers, token, body, set }) => idempotentPost(rt.idempotency, { request, headers, token, body, set }, (scope) => createSubscription(rt, body, { kind: "api_token", id: token.id }, scope, requestIdOf(request)), (stored) => openReplayedSecret(rt, stored)), {
      body: SubscriptionInput,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 201: SubscriptionEnvelope, ...problemResponses(400, 401, 403, 409, 410, 413, 415, 422) },
      detail: {
        operationId: "createWebhookSubscription",
        summary: "Create a webhook subscription",
        description:
          "Creates a subscription and its signing secret (whsec_..., shown in full only in this response and in rotate-secret's). Events are POSTed as JSON {type, event_id, timestamp, data} with Standard Webhooks headers webhook-id (the delivery id), webhook-timestamp and webhook-signature. Targets on loopback, private, link-local or metadata addresses are refused, unless the service's --allow-private-targets allows their network.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .get("/webhook-subscriptions", ({ query }) => listSubscriptionsPage(rt.db, rt.secrets, query), {
      query: SubscriptionListQuery,
      beforeHandle: refuseListWhileAnswersUnread(rt),
      response: { 200: SubscriptionListEnvelope, ...problemResponses(401, 403, 422) },
      detail: { operationId: "listWebhookSubscriptions", summary: "List webhook subscriptions", description: "Newest first; secrets masked. Filter by event kind with `event`.", tags: subscriptionTags, ...secured },
    })
    .get("/webhook-subscriptions/:subscriptionId", async ({ params }) => ({ data: await getSubscription(rt.db, params.subscriptionId) }), {
      params: SubscriptionId,
      response: { 200: SubscriptionEnvelope, ...problemResponses(401, 403, 404, 422) },
      detail: { operationId: "getWebhookSubscription", summary: "Get a webhook subscription", description: "The secret is masked.", tags: subscriptionTags, ...secured },
    })
    .get("/webhook-subscriptions/:subscriptionId/stats", async ({ params }) => ({ data: await getSubscriptionStats(rt.db, params.subscriptionId) }), {
      params: SubscriptionId,
      response: { 200: SubscriptionStatsEnvelope, ...problemResponses(401, 403, 404, 422) },
      detail: {
        operationId: "getWebhookSubscriptionStats",
        summary: "Get a webhook subscription's endpoint health",
        description:
          "Attempts of the last 24 hours and of the last 7 days (whole hours, the current one included): how many succeeded (2xx) and failed, the success rate, and latency percentiles p50, p90, p99 in milliseconds. Also the subscription's status and when its current streak of failed attempts began.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .post("/webhook-subscriptions/:subscriptionId/enable", (ctx) =>
      idempotentPost(rt.idempotency, ctx, async (scope) => ({ status: 200, body: { data: await enableSubscription(rt, ctx.params.subscriptionId, scope, makerOf(ctx.request)) } })), {
      params: SubscriptionId,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 200: SubscriptionEnvelope, ...problemResponses(401, 403, 404, 409, 422) },
      detail: {
        operationId: "enableWebhookSubscription",
        summary: "Enable a disabled webhook subscription",
        description:
          "Makes a subscription disabled (410 Gone, or every attempt failed for --disable-failing-after-hours) active again and forgets its failing streak and its receiver's hold (held_until): events from now on are delivered to it, at once. Deliveries failed while it was disabled stay failed; POST .../recover queues them again. An active subscription is answered unchanged. A subscription whose signing secret was lost with the secrets key (crm secrets-key reset) is refused, 409 secret-rotation-required, until its secret is rotated: it would sign with a secret no receiver knows.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .patch("/webhook-subscriptions/:subscriptionId", async ({ request, params, body }) => ({ data: await updateSubscription(rt, params.subscriptionId, body, makerOf(request)) }), {
      params: SubscriptionId,
      body: SubscriptionUpdate,
      response: { 200: SubscriptionEnvelope, ...problemResponses(400, 401, 403, 404, 413, 415, 422) },
      detail: {
        operationId: "updateWebhookSubscription",
        summary: "Edit a webhook subscription's description or rate cap",
        description: "Changes the description and max_rate (null removes either); the delivery loop paces by the new cap from its next attempt on. The target URL and events do not change in place: create a new subscription, confirm it receives, then delete the old one.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .delete("/webhook-subscriptions/:subscriptionId", async ({ params, set }) => {
      await deleteSubscription(rt, params.subscriptionId);
      set.status = 204;
    }, {
      params: SubscriptionId,
      response: { 204: t.Void(), ...problemResponses(401, 403, 404, 422) },
      detail: { operationId: "deleteWebhookSubscription", summary: "Delete a webhook subscription", description: "Nothing more is sent to it; its pending deliveries end as failed. Its delivery history stays readable.", tags: subscriptionTags, ...secured },
    })
    .post("/webhook-subscriptions/:subscriptionId/test", (ctx) =>
      idempotentPost(rt.idempotency, ctx, async (scope) => ({ status: 202, body: { data: await sendTestEvent(rt, ctx.params.subscriptionId, scope, originOf(ctx.request)) } })), {
      params: SubscriptionId,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 202: TestEventEnvelope, ...problemResponses(401, 403, 404, 409, 422) },
      detail: {
        operationId: "sendWebhookTestEvent",
        summary: "Send a test event",
        description: "Sends a webhook.ping event ({subscription_id}) to this subscription only, ahead of its deliveries waiting (within its max_rate and its attempts at once). Follow it with GET /webhook-deliveries/{deliveryId}.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .post("/webhook-subscriptions/:subscriptionId/rotate-secret", (ctx) =>
      idempotentPost(rt.idempotency, ctx, (scope) => rotateSecret(rt, ctx.params.subscriptionId, ctx.body ?? {}, scope, makerOf(ctx.request)), (stored) => openReplayedSecret(rt, stored)), {
      params: SubscriptionId,
      body: t.Optional(SecretRotationInput),
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 200: SubscriptionEnvelope, ...problemResponses(400, 401, 403, 404, 409, 410, 413, 415, 422) },
      detail: {
        operationId: "rotateWebhookSubscriptionSecret",
        summary: "Rotate a subscription's signing secret",
        description:
          "Replaces the signing secret with a new one, shown in full only in this response. For the grace period (grace_hours, default 24) every request carries two signatures in webhook-signature, `v1,<new> v1,<previous>`, so a receiver verifying with either secret keeps working; then only the new one. A test event (POST .../test) carries both too, so it does not tell whether the receiver has the new secret; the console's rotation wizard signs its test with the new one alone. Rotating again within the grace period drops the oldest secret.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .post("/webhook-subscriptions/:subscriptionId/recover", ({ request, headers, token, body, set, params }) => idempotentPost(rt.idempotency, { request, headers, token, body, set }, (scope) => recoverDeliveries(rt, params.subscriptionId, body, scope)), {
      params: SubscriptionId,
      body: RecoveryInput,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 202: RecoveryEnvelope, ...problemResponses(400, 401, 403, 404, 409, 413, 415, 422) },
      detail: {
        operationId: "recoverWebhookDeliveries",
        summary: "Send a window's failed deliveries again",
        description:
          "Queues every delivery of this subscription created in [since, until) whose status is failed for one more attempt with its original webhook-id, oldest first, through the normal delivery loop and its per-subscription limits. Answers 202 with the number queued. 409 if the subscription is disabled. It queues 1,000 a write: refused between writes (503), what was queued stays queued, and sent again with the same Idempotency-Key it goes on where it stopped; without one it starts over from since.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .post("/webhook-subscriptions/:subscriptionId/pause", ({ request, headers, token, body, set, params }) => idempotentPost(rt.idempotency, { request, headers, token, body, set }, (scope) => pauseSubscription(rt, params.subscriptionId, true, scope, makerOf(request))), {
      params: SubscriptionId,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 200: SubscriptionEnvelope, ...problemResponses(401, 403, 404, 409, 422) },
      detail: {
        operationId: "pauseWebhookSubscription",
        summary: "Pause a webhook subscription",
        description: "Stops sending to the receiver without losing anything: events still create deliveries, which wait as pending (retries too) until the subscription is resumed. paused_by says what paused it (api_token here; operator for the console's Pause). Pausing a paused subscription changes nothing, its paused_at and paused_by included.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .post("/webhook-subscriptions/:subscriptionId/resume", ({ request, headers, token, body, set, params }) => idempotentPost(rt.idempotency, { request, headers, token, body, set }, (scope) => pauseSubscription(rt, params.subscriptionId, false, scope, makerOf(request))), {
      params: SubscriptionId,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 200: SubscriptionEnvelope, ...problemResponses(401, 403, 404, 409, 422) },
      detail: {
        operationId: "resumeWebhookSubscription",
        summary: "Resume a paused webhook subscription",
        description: "The deliveries that waited go out at once, oldest first, then new ones as they come. Resuming an active subscription changes nothing.",
        tags: subscriptionTags,
        ...secured,
      },
    })
    .get("/event-types", () => ({ data: eventTypes() }), {
      response: { 200: EventTypeListEnvelope, ...problemResponses(401, 403, 422) },
      detail: {
        operationId: "listEventTypes",
        summary: "List the webhook event types",
        description: "Every event kind a subscription can ask for, with what it means and the JSON Schema of the body delivered. The same schemas are in this document's `webhooks`.",
        tags: eventTypeTags,
        ...secured,
      },
    })
    .get("/webhook-deliveries", ({ query }) => listDeliveriesPage(rt.db, rt.secrets, query), {
      query: DeliveryListQuery,
      beforeHandle: refuseListWhileAnswersUnread(rt),
      response: { 200: DeliveryListEnvelope, ...problemResponses(401, 403, 422) },
      detail: { operationId: "listWebhookDeliveries", summary: "List webhook deliveries", description: "Newest first. One delivery per event and subscription; its id is the webhook-id header your receiver saw.", tags: deliveryTags, ...secured },
    })
    .get("/webhook-deliveries/:deliveryId", async ({ params }) => ({ data: await getDelivery(rt.db, params.deliveryId) }), {
      params: DeliveryId,
      response: { 200: DeliveryDetailEnvelope, ...problemResponses(401, 403, 404, 422) },
      detail: { operationId: "getWebhookDelivery", summary: "Get a webhook delivery with its attempts", description: "Adds the body sent and every attempt: when, how long, the request headers, the response status, headers of interest and the first bytes of the body (1 KiB by default), or the error in words.", tags: deliveryTags, ...secured },
    })
    .post("/webhook-deliveries/:deliveryId/retry", (ctx) =>
      idempotentPost(rt.idempotency, ctx, async (scope) => ({ status: 200, body: { data: await retryDelivery(rt, ctx.params.deliveryId, scope) } })), {
      params: DeliveryId,
      transform: fingerprintSentBody,
      headers: IdempotencyKeyHeader,
      response: { 200: DeliveryEnvelope, ...problemResponses(401, 403, 404, 409, 422, 503) },
      detail: {
        operationId: "retryWebhookDelivery",
        summary: "Retry a webhook delivery now",
        description: `Makes one manual attempt at once, whatever the delivery's status, and answers with the delivery afterwards. A pending delivery keeps its schedule if the attempt fails. 409 if its subscription is deleted, disabled or paused, or an attempt is under way; 503 with Retry-After while its subscription has ${MAX_PER_SUBSCRIPTION} attempts under way, or on this instance as many as it sends at once to a receiver that left attempts unanswered (the attempt counts among those), or ${MAX_MANUAL_ATTEMPTS} manual attempts are (Retry-After: the seconds until the oldest such attempt on this instance ends at the latest, at the delivery timeout); 503 secrets-key-replaced, nothing sent, from an instance left running with the secrets key crm secrets-key rotate replaced.`,
        tags: deliveryTags,
        ...secured,
      },
    });
}
