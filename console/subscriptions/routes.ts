import { Elysia, t } from "elysia";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { originOf, requestIdOf } from "../../server/http/request-log.ts";
import type { Runtime } from "../../server/runtime.ts";
import type { ProblemError } from "../../server/shared/problem.ts";
import type { Subscription } from "../../server/webhooks/model.ts";
import type { ConsoleSession } from "../model.ts";
import { enableSubscription, getSubscription, getSubscriptionStats, pauseSubscription } from "../../server/webhooks/service.ts";
import { htmlResponse, redirect } from "../http.ts";
import { isolated, receiverUrl } from "../pages/parts.tsx";
import { CONSOLE_DETAIL, consoleTime, field, fields, flagQuery, IdParam, OptionalForm, problemOf, signedInConsole } from "../shell.ts";
import { makerNames } from "../../server/auth/service.ts";
import { madeByOperator } from "../../server/shared/made-by.ts";
import { recentFailures, subscriptionsHealth } from "./health.ts";
import { subscriptionPage } from "./health-pages.tsx";
import {
  deleteSubscriptionPage,
  editSubscriptionPage,
  recoverPage,
  rotationNewPage,
  rotationPage,
  rotationPickPage,
  secretRotationPage,
  subscriptionsPage,
} from "./pages.tsx";
import {
  createSubscriptionFromForm,
  deleteSubscriptionFromForm,
  editSubscriptionFromForm,
  finishRotation,
  finishSecretRotation,
  openRotationFrom,
  recoverFromForm,
  recoveryPreview,
  rotateSecretFromForm,
  rotationView,
  secretRotationView,
  sendRotationTest,
  sendSecretRotationTest,
  startRotation,
  subscriptionChoices,
  subscriptionMakers,
  subscriptionsOverview,
  type SubscriptionForm,
} from "./service.ts";

type PostedForm = Parameters<typeof field>[0];

function subscriptionForm(form: PostedForm): SubscriptionForm {
  return { target_url: field(form, "target_url"), description: field(form, "description"), events: fields(form, "events"), max_rate: field(form, "max_rate") };
}

/** DONE_NOTICES confirm on the subscriptions page what a row's form did, by the flag its redirect sets: the page reloads, so it must say what happened. */
const DONE_NOTICES: Record<string, string> = {
  deleted: "Subscription deleted. Nothing more is sent to it.",
  enabled: "Subscription enabled. Events from now on are delivered to it; recover the deliveries that failed while it was disabled.",
  paused: "Subscription paused. Its deliveries wait until it is resumed.",
  resumed: "Subscription resumed. The deliveries that waited are sent now.",
  saved: "Description saved.",
};

/** SECRET_ROTATION_REQUIRED is the console's words for enable's refusal of a subscription whose secret was lost with the secrets key. */
const SECRET_ROTATION_REQUIRED =
  "Not enabled: its signing secret was lost with the secrets key (crm secrets-key reset), and the one it has now is known to no receiver. Rotate its secret (Rotate secret), give the new one to its receiver, then enable it.";

/**
 * subscriptionRoutes are the subscriptions: the list with recent counts, one subscription's health
 * and failures, create, edit, pause, enable, delete and recover failed deliveries. Every form that
 * cannot be undone has a confirm step.
 */
export function subscriptionRoutes(rt: Runtime) {
  const db = rt.db;
  return new Elysia({ name: "console-subscriptions", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get(
      "/subscriptions",
      async ({ session, query }) => {
        // Only the count the recover form's redirect writes: a hand-made "1e20" or "-1" says nothing.
        const recovered = query.recovered !== undefined && /^\d{1,9}$/.test(query.recovered) ? Number(query.recovered) : null;
        const flagged = Object.entries(DONE_NOTICES).find(([flag]) => query[flag]);
        const notice =
          recovered !== null
            ? { kind: "success" as const, text: `${recovered} failed ${recovered === 1 ? "delivery" : "deliveries"} queued again, oldest first.` }
            : flagged
              ? { kind: "success" as const, text: flagged[1] }
              : null;
        return htmlResponse(subscriptionsPage({ session, ...(await subscriptionsOverview(db)), disableAfterHours: rt.config.disableFailingAfterHours, notice }));
      },
      {
        query: t.Object(
          Object.fromEntries(["recovered", ...Object.keys(DONE_NOTICES)].map((flag) => [flag, t.Optional(t.String({ maxLength: 10 }))])),
          { additionalProperties: true },
        ),
      },
    )
    .post(
      "/subscriptions",
      async ({ request, session, body }) => {
        let form: SubscriptionForm | undefined;
        try {
          form = subscriptionForm(body);
          const created = await createSubscriptionFromForm(rt, session, form, field(body, "form_key"), requestIdOf(request));
          const notice = { kind: "success" as const, text: `Subscription to ${isolated(receiverUrl(created.target_url))} created.` };
          return htmlResponse(subscriptionsPage({ session, ...(await subscriptionsOverview(db)), disableAfterHours: rt.config.disableFailingAfterHours, created, notice }), 201);
        } catch (error) {
          const failure = problemOf(error);
          return htmlResponse(subscriptionsPage({ session, ...(await subscriptionsOverview(db)), disableAfterHours: rt.config.disableFailingAfterHours, form, refusal: failure }), failure.status);
        }
      },
      { body: OptionalForm },
    )
    .get(
      "/subscriptions/:id",
      async ({ session, params }) => {
        const subscription = await getSubscription(db, params.id);
        const [health] = await subscriptionsHealth(db, [subscription]);
        return htmlResponse(subscriptionPage({ session, health: health!, failures: await recentFailures(db, subscription.id, session.operator.id), rotationId: await openRotationFrom(db, subscription.id), disableAfterHours: rt.config.disableFailingAfterHours, stats: await getSubscriptionStats(db, subscription.id), makers: await subscriptionMakers(db, subscription.id), names: await makerNames(db) }));
      },
      { params: IdParam },
    )
    .post(
      "/subscriptions/:id/enable",
      async ({ session, params }) => {
        try {
          await enableSubscription(rt, params.id, null, madeByOperator(session.operator));
        } catch (error) {
          // A page shown before the reset still offers Enable: it says what to do instead.
          if (problemOf(error, 409).slug !== "secret-rotation-required") throw error;
          const notice = { kind: "error" as const, text: SECRET_ROTATION_REQUIRED };
          return htmlResponse(subscriptionsPage({ session, ...(await subscriptionsOverview(db)), disableAfterHours: rt.config.disableFailingAfterHours, notice }), 409);
        }
        return redirect(`${CONSOLE_PREFIX}/subscriptions?enabled=1`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .get(
      "/subscriptions/:id/delete",
      async ({ session, params }) => htmlResponse(deleteSubscriptionPage({ session, subscription: await getSubscription(db, params.id), rotationId: await openRotationFrom(db, params.id) })),
      { params: IdParam },
    )
    .post(
      "/subscriptions/:id/delete",
      async ({ session, params, body }) => {
        await deleteSubscriptionFromForm(rt, session, params.id, field(body, "form_key"));
        return redirect(`${CONSOLE_PREFIX}/subscriptions?deleted=1`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .get("/subscriptions/:id/edit", async ({ session, params }) => htmlResponse(editSubscriptionPage({ session, subscription: await getSubscription(db, params.id) })), { params: IdParam })
    .post(
      "/subscriptions/:id/edit",
      async ({ session, params, body }) => {
        let description: string | undefined;
        try {
          description = field(body, "description");
          await editSubscriptionFromForm(rt, session, params.id, description);
          return redirect(`${CONSOLE_PREFIX}/subscriptions?saved=1`);
        } catch (error) {
          const failure = problemOf(error, 422);
          return htmlResponse(editSubscriptionPage({ session, subscription: await getSubscription(db, params.id), description, refusal: failure }), failure.status);
        }
      },
      { params: IdParam, body: OptionalForm },
    )
    .post(
      "/subscriptions/:id/pause",
      async ({ session, params }) => {
        await pauseSubscription(rt, params.id, true, null, madeByOperator(session.operator));
        return redirect(`${CONSOLE_PREFIX}/subscriptions?paused=1`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .post(
      "/subscriptions/:id/resume",
      async ({ session, params }) => {
        await pauseSubscription(rt, params.id, false, null, madeByOperator(session.operator));
        return redirect(`${CONSOLE_PREFIX}/subscriptions?resumed=1`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .get(
      "/subscriptions/:id/recover",
      async ({ session, params, query }) => {
        const subscription = await getSubscription(db, params.id);
        const now = Date.now();
        const defaults = { since: new Date(now - 24 * 3_600_000).toISOString(), until: new Date(now).toISOString() };
        if (!query.since) return htmlResponse(recoverPage({ session, subscription, window: defaults, preview: null }));
        try {
          const preview = await recoveryPreview(db, params.id, query.since, query.until ?? "");
          return htmlResponse(recoverPage({ session, subscription, window: preview, preview }));
        } catch (error) {
          return refusedRecoverPage(session, subscription, query.since, query.until ?? "", problemOf(error, 422));
        }
      },
      { params: IdParam, query: t.Object({ since: t.Optional(t.String({ maxLength: 40 })), until: t.Optional(t.String({ maxLength: 40 })) }, { additionalProperties: true }) },
    )
    .post(
      "/subscriptions/:id/recover",
      async ({ session, params, body }) => {
        const [since, until] = [field(body, "since"), field(body, "until")];
        try {
          const queued = await recoverFromForm(rt, session, params.id, since, until, field(body, "form_key"));
          return redirect(`${CONSOLE_PREFIX}/subscriptions?recovered=${queued}`);
        } catch (error) {
          // A window the preview took can be refused moments later: its since passed the 14 days meanwhile.
          const failure = problemOf(error, 422);
          return refusedRecoverPage(session, await getSubscription(db, params.id), since, until, failure);
        }
      },
      { params: IdParam, body: OptionalForm },
    );
}

/** refusedRecoverPage is the recover form refusing a window: its fields show what was refused, beside the reason. */
function refusedRecoverPage(session: ConsoleSession, subscription: Subscription, since: string, until: string, failure: ProblemError): Response {
  return htmlResponse(recoverPage({ session, subscription, window: { since: consoleTime(since), until: consoleTime(until) }, preview: null, refusal: failure }), failure.status);
}

/** WIZARD_TEST_REFUSALS are the refusals of a wizard's test event its page shows in place of an error page: they say what to do first. */
const WIZARD_TEST_REFUSALS = new Set(["subscription-disabled", "subscription-paused"]);

/** wizardTestRefusal is the refusal a wizard's page shows of its test event's failure (WIZARD_TEST_REFUSALS); any other failure is thrown on, to the error page. */
function wizardTestRefusal(error: unknown) {
  const failure = problemOf(error, 409);
  if (!WIZARD_TEST_REFUSALS.has(failure.slug)) throw failure;
  return failure;
}

/**
 * rotationRoutes are the two wizards of the subscriptions feature: the secret rotation (a new
 * secret with a grace period, a test, retiring the previous secret) and the guided replacement of
 * a subscription by a new one (rotation). Their state is read from the database at every step.
 */
export function rotationRoutes(rt: Runtime) {
  const db = rt.db;
  return new Elysia({ name: "console-rotations", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get(
      "/subscriptions/:id/secret-rotation",
      async ({ session, params, query }) => htmlResponse(secretRotationPage({ session, view: await secretRotationView(db, params.id), finished: query.finished === "1" })),
      { params: IdParam, query: flagQuery("finished") },
    )
    .post(
      "/subscriptions/:id/rotate-secret",
      async ({ session, params, body }) => {
        try {
          const secret = await rotateSecretFromForm(rt, session, params.id, { graceHours: field(body, "grace_hours"), secretTag: field(body, "secret_tag"), formKey: field(body, "form_key") });
          const view = await secretRotationView(db, params.id);
          // With no grace period the rotation is finished at once.
          return htmlResponse(secretRotationPage({ session, view, secret, finished: view.step === "rotate" }), 201);
        } catch (error) {
          const failure = problemOf(error, 409, 422);
          return htmlResponse(secretRotationPage({ session, view: await secretRotationView(db, params.id), refusal: failure }), failure.status);
        }
      },
      { params: IdParam, body: OptionalForm },
    )
    .post(
      "/subscriptions/:id/secret-rotation/test",
      async ({ request, session, params, body }) => {
        try {
          await sendSecretRotationTest(rt, session, params.id, field(body, "form_key"), originOf(request));
        } catch (error) {
          const failure = wizardTestRefusal(error);
          return htmlResponse(secretRotationPage({ session, view: await secretRotationView(db, params.id), refusal: failure }), failure.status);
        }
        return redirect(`${CONSOLE_PREFIX}/subscriptions/${params.id}/secret-rotation#step-test`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .post(
      "/subscriptions/:id/secret-rotation/finish",
      async ({ session, params, body }) => {
        try {
          await finishSecretRotation(rt, session, params.id, field(body, "confirm") === "yes");
          return redirect(`${CONSOLE_PREFIX}/subscriptions/${params.id}/secret-rotation?finished=1`);
        } catch (error) {
          const failure = problemOf(error, 422);
          return htmlResponse(secretRotationPage({ session, view: await secretRotationView(db, params.id), refusal: failure }), failure.status);
        }
      },
      { params: IdParam, body: OptionalForm },
    )
    .get(
      "/rotations/new",
      async ({ session, query }) => {
        if (!query.from) return htmlResponse(rotationPickPage({ session, subscriptions: await subscriptionChoices(db) }));
        const old = await getSubscription(db, query.from);
        if (query.kind === "secret") return redirect(`${CONSOLE_PREFIX}/subscriptions/${encodeURIComponent(old.id)}/secret-rotation`);
        const open = await openRotationFrom(db, old.id);
        if (open) return redirect(`${CONSOLE_PREFIX}/rotations/${open}`);
        return htmlResponse(rotationNewPage({ session, old }));
      },
      { query: t.Object({ from: t.Optional(t.String({ maxLength: 64 })), kind: t.Optional(t.String({ maxLength: 10 })) }, { additionalProperties: true }) },
    )
    .post(
      "/rotations",
      async ({ request, session, body }) => {
        const old = await getSubscription(db, field(body, "from"));
        let form: SubscriptionForm | undefined;
        try {
          form = subscriptionForm(body);
          const started = await startRotation(rt, session.operator, old.id, form, requestIdOf(request));
          if (started.secret === null) return redirect(`${CONSOLE_PREFIX}/rotations/${started.id}`);
          return htmlResponse(rotationPage({ session, rotation: await rotationView(db, started.id), secret: started.secret }), 201);
        } catch (error) {
          const failure = problemOf(error);
          return htmlResponse(rotationNewPage({ session, old, form, refusal: failure }), failure.status);
        }
      },
      { body: OptionalForm },
    )
    .get("/rotations/:id", async ({ session, params }) => htmlResponse(rotationPage({ session, rotation: await rotationView(db, params.id) })), { params: IdParam })
    .post(
      "/rotations/:id/test",
      async ({ request, session, params, body }) => {
        try {
          await sendRotationTest(rt, session, params.id, field(body, "form_key"), originOf(request));
        } catch (error) {
          const failure = wizardTestRefusal(error);
          return htmlResponse(rotationPage({ session, rotation: await rotationView(db, params.id), refusal: failure }), failure.status);
        }
        return redirect(`${CONSOLE_PREFIX}/rotations/${params.id}#step-test`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .post(
      "/rotations/:id/delete-old",
      async ({ session, params, body }) => {
        try {
          await finishRotation(rt, params.id, field(body, "confirm") === "yes");
          return redirect(`${CONSOLE_PREFIX}/rotations/${params.id}`);
        } catch (error) {
          const failure = problemOf(error, 422);
          return htmlResponse(rotationPage({ session, rotation: await rotationView(db, params.id), refusal: failure }), failure.status);
        }
      },
      { params: IdParam, body: OptionalForm },
    );
}
