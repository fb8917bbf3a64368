import type { Server } from "bun";
import { Elysia, t } from "elysia";
import { listTokens } from "../server/auth/service.ts";
import { CONSOLE_PREFIX } from "../server/http/conventions.ts";
import { problem, ProblemError } from "../server/shared/problem.ts";
import { clientAddress, clientHints, requestIsHttps } from "../server/http/client-address.ts";
import type { Runtime } from "../server/runtime.ts";
import { createUser } from "../server/users/service.ts";
import { deleteSubscription, enableSubscription, getSubscription, pauseSubscription, retryDelivery } from "../server/webhooks/service.ts";
import css from "./assets/console.css" with { type: "text" };
import { islandScripts } from "./bundle.ts";
import {
  assetResponse,
  clearCookieHeader,
  cookieHeader,
  htmlResponse,
  jsonResponse,
  PRE_SESSION_COOKIE,
  problemJsonResponse,
  readCookie,
  redirect,
  SESSION_COOKIE,
} from "./http.ts";
import { DeliveryFilterQuery, FormBody, type ConsoleSession } from "./model.ts";
import { loginPage, messagePage, setupPage } from "./pages/auth.tsx";
import type { NoticeData } from "./pages/parts.tsx";
import { deliveriesPage, deliveryPage } from "./pages/deliveries.tsx";
import { revokeTokenPage, tokensPage, usersPage } from "./pages/people.tsx";
import { deleteSubscriptionPage, editSubscriptionPage, recoverPage, rotationNewPage, rotationPage, rotationPickPage, secretRotationPage, subscriptionsPage } from "./pages/subscriptions.tsx";
import {
  allSubscriptions,
  completeSetup,
  createSubscriptionFromForm,
  createTokenFromForm,
  csrfTokenFor,
  csrfTokenMatches,
  deliveryWatch,
  deliveryWithSubscription,
  endSession,
  finishRotation,
  editSubscriptionFromForm,
  finishSecretRotation,
  recoverFromForm,
  recoveryPreview,
  rotateSecretFromForm,
  secretRotationView,
  sendSecretRotationTest,
  LATEST_DELIVERIES,
  latestDeliveries,
  newCsrfSeed,
  resumeSession,
  revokeTokenFromConsole,
  rotationView,
  sendRotationTest,
  setupCodeUsable,
  signIn,
  startRotation,
  openRotationFrom,
  subscriptionChoices,
  subscriptionsOverview,
  usersOnPage,
  type SubscriptionForm,
} from "./service.ts";

const OptionalForm = t.Optional(FormBody);
const IdParam = t.Object({ id: t.String({ maxLength: 64 }) });
const UsersQuery = t.Object({ page: t.Optional(t.String({ maxLength: 20 })), added: t.Optional(t.String({ maxLength: 10 })) }, { additionalProperties: true });
/** flagQuery accepts the flag a redirect after a form post sets, so the page can confirm what was done. */
const flagQuery = (flag: string) => t.Object({ [flag]: t.Optional(t.String({ maxLength: 10 })) }, { additionalProperties: true });

// Elysia types an optional record body loosely ({} | null); the schema guarantees a FormBody or nothing.
type PostedForm = {} | null | undefined;

/** field reads one form field as text ("" when absent; the first value when repeated). */
function field(form: PostedForm, name: string): string {
  const value = (form as FormBody | null | undefined)?.[name];
  return (Array.isArray(value) ? value[0] : value) ?? "";
}

/** fields reads a form field that may repeat (checkboxes). */
function fields(form: PostedForm, name: string): string[] {
  const value = (form as FormBody | null | undefined)?.[name];
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}

function subscriptionForm(form: PostedForm): SubscriptionForm {
  return { target_url: field(form, "target_url"), description: field(form, "description"), events: fields(form, "events"), max_rate: field(form, "max_rate") };
}

/** safeNext keeps a post-sign-in destination only when it is a console path (no open redirect). */
function safeNext(next: string | undefined): string | undefined {
  return next && next.length <= 500 && next.startsWith(`${CONSOLE_PREFIX}/`) && !next.includes("\\") ? next : undefined;
}

/** addressOf names the client for sign-in throttling: the peer, or the client behind a trusted proxy. */
function addressOf(server: Server<unknown> | null, request: Request, trustedProxies: string[]): string {
  return clientAddress(clientHints(request, server?.requestIP(request)?.address ?? null), trustedProxies) ?? "unknown";
}

/** pageError turns a service's problem into the console page that explains it. */
function pageError(session: ConsoleSession | null, error: unknown): Response {
  if (!(error instanceof ProblemError)) throw error;
  const titles: Record<number, string> = { 403: "Not allowed", 404: "Not found", 409: "Not possible now", 422: "Check your input", 503: "Try again soon" };
  return htmlResponse(messagePage({ session, title: titles[error.status] ?? "Something went wrong", text: error.message }), error.status, { headers: error.headers });
}

/** orErrorPage answers with what `work` returns, or with the page explaining the problem it threw. */
async function orErrorPage(session: ConsoleSession | null, work: () => Response | Promise<Response>): Promise<Response> {
  try {
    return await work();
  } catch (error) {
    return pageError(session, error);
  }
}

/** orProblemJson answers a console JSON endpoint with what `work` returns, or with the problem it threw. */
async function orProblemJson(work: () => unknown): Promise<Response> {
  try {
    return jsonResponse(await work());
  } catch (error) {
    if (!(error instanceof ProblemError)) throw error;
    return problemJsonResponse(error.toProblem());
  }
}

/** formFailure turns a service's problem into the status and message of the form page shown again. */
function formFailure(error: unknown): { status: number; notice: NoticeData; headers: Record<string, string> } {
  if (!(error instanceof ProblemError)) throw error;
  return { status: error.status, notice: { kind: "error", text: error.message }, headers: error.headers };
}

/**
 * consoleRoutes serves the operator console under /console: server-rendered pages and forms,
 * two JSON endpoints for the live islands, and the console's CSS and island scripts. Pages need
 * an operator session (a cookie); API tokens mean nothing here, and sessions nothing on the API.
 */
export function consoleRoutes(rt: Runtime) {
  const db = rt.db;
  return (
    new Elysia({ name: "console", prefix: CONSOLE_PREFIX })
      // The console is not part of the public API: keep it out of the OpenAPI document.
      .guard({ detail: { hide: true } })
      .derive(async ({ request, server }) => {
        const secure = requestIsHttps(
          { url: request.url, forwardedProto: request.headers.get("x-forwarded-proto"), peer: server?.requestIP(request)?.address ?? null },
          rt.config.trustedProxies,
        );
        const sessionSecret = readCookie(request, SESSION_COOKIE);
        const session = await resumeSession(db, sessionSecret);
        // Forms carry a token derived from the session, or before sign-in from a pre-session cookie.
        return { secure, session, sessionSecret, csrfSeed: session ? sessionSecret : readCookie(request, PRE_SESSION_COOKIE) };
      })
      .get("/assets/console.css", () => assetResponse(css, "text/css; charset=utf-8"))
      .get(
        "/assets/:file",
        async ({ params, session }) => {
          const script = (await islandScripts())[params.file];
          return script === undefined ? htmlResponse(messagePage({ session, title: "Not found", text: "There is no such file." }), 404) : assetResponse(script, "text/javascript; charset=utf-8");
        },
        { params: t.Object({ file: t.String({ maxLength: 64 }) }) },
      )
      .onBeforeHandle(({ request, body, csrfSeed, session }) => {
        if (request.method !== "POST" || csrfTokenMatches(csrfSeed, (body as FormBody | undefined)?._csrf)) return;
        return htmlResponse(
          messagePage({ session, title: "Form expired", text: "This form was not sent from a current console page (its security token is missing or stale). Go back, reload the page and send it again." }),
          403,
        );
      })
      .get(
        "/setup",
        async ({ query, csrfSeed, secure }) => {
          const seed = csrfSeed ?? newCsrfSeed();
          const usable = await setupCodeUsable(db, query.code ?? "");
          return htmlResponse(setupPage({ csrfToken: csrfTokenFor(seed), code: query.code ?? "", usable }), usable ? 200 : 403, {
            cookies: csrfSeed ? [] : [cookieHeader(PRE_SESSION_COOKIE, seed, secure)],
          });
        },
        { query: t.Object({ code: t.Optional(t.String({ maxLength: 200 })) }, { additionalProperties: true }) },
      )
      .post(
        "/setup",
        async ({ body, csrfSeed, secure }) => {
          try {
            const secret = await completeSetup(db, { code: field(body, "code"), email: field(body, "email"), password: field(body, "password"), passwordAgain: field(body, "password_again") });
            return redirect(`${CONSOLE_PREFIX}/`, { cookies: [cookieHeader(SESSION_COOKIE, secret, secure), clearCookieHeader(PRE_SESSION_COOKIE, secure)] });
          } catch (error) {
            const { status, notice } = formFailure(error);
            const usable = await setupCodeUsable(db, field(body, "code"));
            return htmlResponse(setupPage({ csrfToken: csrfTokenFor(csrfSeed!), code: field(body, "code"), usable, email: field(body, "email"), notice }), status);
          }
        },
        { body: OptionalForm },
      )
      .get(
        "/login",
        ({ session, csrfSeed, secure, query }) => {
          if (session) return redirect(safeNext(query.next) ?? `${CONSOLE_PREFIX}/`);
          const seed = csrfSeed ?? newCsrfSeed();
          return htmlResponse(loginPage({ csrfToken: csrfTokenFor(seed), next: safeNext(query.next) }), 200, { cookies: csrfSeed ? [] : [cookieHeader(PRE_SESSION_COOKIE, seed, secure)] });
        },
        { query: t.Object({ next: t.Optional(t.String({ maxLength: 500 })) }, { additionalProperties: true }) },
      )
      .post(
        "/login",
        async ({ body, csrfSeed, secure, request, server }) => {
          const email = field(body, "email");
          try {
            const secret = await signIn(db, { email, password: field(body, "password"), address: addressOf(server, request, rt.config.trustedProxies) });
            return redirect(safeNext(field(body, "next")) ?? `${CONSOLE_PREFIX}/`, {
              cookies: [cookieHeader(SESSION_COOKIE, secret, secure), clearCookieHeader(PRE_SESSION_COOKIE, secure)],
            });
          } catch (error) {
            const { status, notice, headers } = formFailure(error);
            return htmlResponse(loginPage({ csrfToken: csrfTokenFor(csrfSeed!), email, next: safeNext(field(body, "next")), notice }), status, { headers });
          }
        },
        { body: OptionalForm },
      )
      // Everything below needs a session: pages send the browser to sign in, JSON endpoints answer 401.
      .onBeforeHandle(({ session, request }) => {
        if (session) return;
        const url = new URL(request.url);
        if (url.pathname.startsWith(`${CONSOLE_PREFIX}/api/`)) {
          return problemJsonResponse(problem(401, "unauthorized", "Sign in to the console first; console endpoints take the session cookie, not API tokens."));
        }
        const next = request.method === "GET" ? safeNext(url.pathname + url.search) : undefined;
        return redirect(`${CONSOLE_PREFIX}/login${next ? `?next=${encodeURIComponent(next)}` : ""}`);
      })
      .post(
        "/logout",
        async ({ sessionSecret, secure }) => {
          await endSession(db, sessionSecret);
          return redirect(`${CONSOLE_PREFIX}/login`, { cookies: [clearCookieHeader(SESSION_COOKIE, secure)] });
        },
        { body: OptionalForm },
      )
      .get(
        "/",
        async ({ session, query }) => {
          const subscriptions = await allSubscriptions(db);
          try {
            return htmlResponse(deliveriesPage({ session: session!, view: await latestDeliveries(db, query), filters: query, subscriptions, limit: LATEST_DELIVERIES }));
          } catch (error) {
            const { status, notice } = formFailure(error);
            return htmlResponse(deliveriesPage({ session: session!, view: await latestDeliveries(db, {}), filters: {}, subscriptions, limit: LATEST_DELIVERIES, notice }), status);
          }
        },
        { query: DeliveryFilterQuery },
      )
      .get(
        "/api/deliveries",
        ({ query }) => orProblemJson(() => latestDeliveries(db, query)),
        { query: DeliveryFilterQuery },
      )
      .get(
        "/api/deliveries/:id",
        ({ params }) => orProblemJson(() => deliveryWatch(db, params.id)),
        { params: IdParam },
      )
      .get(
        "/deliveries/:id",
        ({ session, params, query }) =>
          orErrorPage(session, async () => {
            const notice = query.retried ? { kind: "success" as const, text: "Retried: the newest attempt is listed first." } : null;
            return htmlResponse(deliveryPage({ session: session!, ...(await deliveryWithSubscription(db, params.id)), notice }));
          }),
        { params: IdParam, query: flagQuery("retried") },
      )
      .post(
        "/deliveries/:id/retry",
        ({ session, params }) =>
          orErrorPage(session, async () => {
            await retryDelivery(rt, params.id);
            return redirect(`${CONSOLE_PREFIX}/deliveries/${params.id}?retried=1`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .get(
        "/subscriptions",
        async ({ session, query }) => {
          const recovered = query.recovered === undefined ? null : Number(query.recovered);
          const notice = query.deleted
            ? { kind: "success" as const, text: "Subscription deleted. Nothing more is sent to it." }
            : recovered !== null && Number.isInteger(recovered)
              ? { kind: "success" as const, text: `${recovered} failed ${recovered === 1 ? "delivery" : "deliveries"} queued again, oldest first.` }
              : query.enabled
                ? { kind: "success" as const, text: "Subscription enabled. Events from now on are delivered to it; recover the deliveries that failed while it was disabled." }
                : null;
          return htmlResponse(subscriptionsPage({ session: session!, ...(await subscriptionsOverview(db)), notice }));
        },
        {
          query: t.Object(
            { deleted: t.Optional(t.String({ maxLength: 10 })), recovered: t.Optional(t.String({ maxLength: 10 })), enabled: t.Optional(t.String({ maxLength: 10 })) },
            { additionalProperties: true },
          ),
        },
      )
      .post(
        "/subscriptions/:id/enable",
        ({ session, params }) =>
          orErrorPage(session, async () => {
            await enableSubscription(rt, params.id);
            return redirect(`${CONSOLE_PREFIX}/subscriptions?enabled=1`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .post(
        "/subscriptions",
        async ({ session, body }) => {
          const form = subscriptionForm(body);
          try {
            const created = await createSubscriptionFromForm(rt, form);
            const notice = { kind: "success" as const, text: `Subscription to ${created.target_url} created.` };
            return htmlResponse(subscriptionsPage({ session: session!, ...(await subscriptionsOverview(db)), created, notice }), 201);
          } catch (error) {
            const { status, notice } = formFailure(error);
            return htmlResponse(subscriptionsPage({ session: session!, ...(await subscriptionsOverview(db)), form, notice }), status);
          }
        },
        { body: OptionalForm },
      )
      .get(
        "/subscriptions/:id/delete",
        ({ session, params }) =>
          orErrorPage(session, async () => htmlResponse(deleteSubscriptionPage({ session: session!, subscription: await getSubscription(db, params.id), rotationId: await openRotationFrom(db, params.id) }))),
        { params: IdParam },
      )
      .post(
        "/subscriptions/:id/delete",
        ({ session, params }) =>
          orErrorPage(session, async () => {
            await deleteSubscription(rt, params.id);
            return redirect(`${CONSOLE_PREFIX}/subscriptions?deleted=1`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .get(
        "/subscriptions/:id/edit",
        ({ session, params }) => orErrorPage(session, async () => htmlResponse(editSubscriptionPage({ session: session!, subscription: await getSubscription(db, params.id) }))),
        { params: IdParam },
      )
      .post(
        "/subscriptions/:id/edit",
        ({ session, params, body }) =>
          orErrorPage(session, async () => {
            const description = field(body, "description");
            try {
              await editSubscriptionFromForm(rt, params.id, description);
              return redirect(`${CONSOLE_PREFIX}/subscriptions`);
            } catch (error) {
              if (!(error instanceof ProblemError) || error.status !== 422) throw error;
              const { status, notice } = formFailure(error);
              return htmlResponse(editSubscriptionPage({ session: session!, subscription: await getSubscription(db, params.id), description, notice }), status);
            }
          }),
        { params: IdParam, body: OptionalForm },
      )
      .post(
        "/subscriptions/:id/pause",
        ({ session, params }) =>
          orErrorPage(session, async () => {
            await pauseSubscription(rt, params.id, true, null);
            return redirect(`${CONSOLE_PREFIX}/subscriptions`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .post(
        "/subscriptions/:id/resume",
        ({ session, params }) =>
          orErrorPage(session, async () => {
            await pauseSubscription(rt, params.id, false, null);
            return redirect(`${CONSOLE_PREFIX}/subscriptions`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .get(
        "/subscriptions/:id/recover",
        ({ session, params, query }) =>
          orErrorPage(session, async () => {
            const subscription = await getSubscription(db, params.id);
            const now = Date.now();
            const defaults = { since: new Date(now - 24 * 3_600_000).toISOString(), until: new Date(now).toISOString() };
            if (!query.since) return htmlResponse(recoverPage({ session: session!, subscription, window: defaults, preview: null }));
            try {
              const preview = await recoveryPreview(db, params.id, query.since, query.until ?? "");
              return htmlResponse(recoverPage({ session: session!, subscription, window: preview, preview }));
            } catch (error) {
              const { status, notice } = formFailure(error);
              return htmlResponse(recoverPage({ session: session!, subscription, window: defaults, preview: null, notice }), status);
            }
          }),
        { params: IdParam, query: t.Object({ since: t.Optional(t.String({ maxLength: 40 })), until: t.Optional(t.String({ maxLength: 40 })) }, { additionalProperties: true }) },
      )
      .post(
        "/subscriptions/:id/recover",
        ({ session, params, body }) =>
          orErrorPage(session, async () => {
            const queued = await recoverFromForm(rt, params.id, field(body, "since"), field(body, "until"));
            return redirect(`${CONSOLE_PREFIX}/subscriptions?recovered=${queued}`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .get(
        "/subscriptions/:id/secret-rotation",
        ({ session, params, query }) =>
          orErrorPage(session, async () => htmlResponse(secretRotationPage({ session: session!, view: await secretRotationView(db, params.id), finished: query.finished === "1" }))),
        { params: IdParam, query: flagQuery("finished") },
      )
      .post(
        "/subscriptions/:id/rotate-secret",
        ({ session, params, body }) =>
          orErrorPage(session, async () => {
            try {
              const secret = await rotateSecretFromForm(rt, params.id, field(body, "grace_hours"));
              const view = await secretRotationView(db, params.id);
              // With no grace period the rotation is finished at once.
              return htmlResponse(secretRotationPage({ session: session!, view, secret, finished: view.step === "rotate" }), 201);
            } catch (error) {
              if (!(error instanceof ProblemError) || error.status !== 422) throw error;
              const { status, notice } = formFailure(error);
              return htmlResponse(secretRotationPage({ session: session!, view: await secretRotationView(db, params.id), notice }), status);
            }
          }),
        { params: IdParam, body: OptionalForm },
      )
      .post(
        "/subscriptions/:id/secret-rotation/test",
        ({ session, params }) =>
          orErrorPage(session, async () => {
            await sendSecretRotationTest(rt, params.id);
            return redirect(`${CONSOLE_PREFIX}/subscriptions/${params.id}/secret-rotation#step-test`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .post(
        "/subscriptions/:id/secret-rotation/finish",
        ({ session, params, body }) =>
          orErrorPage(session, async () => {
            try {
              await finishSecretRotation(rt, params.id, field(body, "confirm") === "yes");
              return redirect(`${CONSOLE_PREFIX}/subscriptions/${params.id}/secret-rotation?finished=1`);
            } catch (error) {
              if (!(error instanceof ProblemError) || error.status !== 422) throw error;
              return htmlResponse(secretRotationPage({ session: session!, view: await secretRotationView(db, params.id), notice: formFailure(error).notice }), 422);
            }
          }),
        { params: IdParam, body: OptionalForm },
      )
      .get(
        "/rotations/new",
        ({ session, query }) =>
          orErrorPage(session, async () => {
            if (!query.from) return htmlResponse(rotationPickPage({ session: session!, subscriptions: await subscriptionChoices(db) }));
            if (query.kind === "secret") return redirect(`${CONSOLE_PREFIX}/subscriptions/${encodeURIComponent((await getSubscription(db, query.from)).id)}/secret-rotation`);
            const open = await openRotationFrom(db, query.from);
            if (open) return redirect(`${CONSOLE_PREFIX}/rotations/${open}`);
            return htmlResponse(rotationNewPage({ session: session!, old: await getSubscription(db, query.from) }));
          }),
        { query: t.Object({ from: t.Optional(t.String({ maxLength: 64 })), kind: t.Optional(t.String({ maxLength: 10 })) }, { additionalProperties: true }) },
      )
      .post(
        "/rotations",
        ({ session, body }) =>
          orErrorPage(session, async () => {
            const old = await getSubscription(db, field(body, "from"));
            const form = subscriptionForm(body);
            try {
              const started = await startRotation(rt, old.id, form);
              if (started.secret === null) return redirect(`${CONSOLE_PREFIX}/rotations/${started.id}`);
              return htmlResponse(rotationPage({ session: session!, rotation: await rotationView(db, started.id), secret: started.secret }), 201);
            } catch (error) {
              const { status, notice } = formFailure(error);
              return htmlResponse(rotationNewPage({ session: session!, old, form, notice }), status);
            }
          }),
        { body: OptionalForm },
      )
      .get(
        "/rotations/:id",
        ({ session, params }) =>
          orErrorPage(session, async () => htmlResponse(rotationPage({ session: session!, rotation: await rotationView(db, params.id) }))),
        { params: IdParam },
      )
      .post(
        "/rotations/:id/test",
        ({ session, params }) =>
          orErrorPage(session, async () => {
            await sendRotationTest(rt, params.id);
            return redirect(`${CONSOLE_PREFIX}/rotations/${params.id}#step-test`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .post(
        "/rotations/:id/delete-old",
        async ({ session, params, body }) => {
          try {
            await finishRotation(rt, params.id, field(body, "confirm") === "yes");
            return redirect(`${CONSOLE_PREFIX}/rotations/${params.id}`);
          } catch (error) {
            if (!(error instanceof ProblemError) || error.status !== 422) return pageError(session, error);
            return htmlResponse(rotationPage({ session: session!, rotation: await rotationView(db, params.id), notice: formFailure(error).notice }), 422);
          }
        },
        { params: IdParam, body: OptionalForm },
      )
      .get(
        "/tokens",
        async ({ session, query }) => {
          const notice = query.revoked ? { kind: "success" as const, text: "Token revoked. Requests with it now get 401." } : null;
          return htmlResponse(tokensPage({ session: session!, tokens: await listTokens(db), notice }));
        },
        { query: flagQuery("revoked") },
      )
      .post(
        "/tokens",
        async ({ session, body }) => {
          const name = field(body, "name");
          try {
            const created = await createTokenFromForm(db, name);
            return htmlResponse(tokensPage({ session: session!, tokens: await listTokens(db), created }), 201);
          } catch (error) {
            const { status, notice } = formFailure(error);
            return htmlResponse(tokensPage({ session: session!, tokens: await listTokens(db), name, notice }), status);
          }
        },
        { body: OptionalForm },
      )
      .get(
        "/tokens/:id/revoke",
        async ({ session, params }) => {
          const token = (await listTokens(db)).find((tk) => tk.id === params.id && tk.revoked_at === null);
          if (!token) return pageError(session, new ProblemError(404, "not-found", "No active API token with this id exists."));
          return htmlResponse(revokeTokenPage({ session: session!, token }));
        },
        { params: IdParam },
      )
      .post(
        "/tokens/:id/revoke",
        ({ session, params }) =>
          orErrorPage(session, async () => {
            await revokeTokenFromConsole(db, params.id);
            return redirect(`${CONSOLE_PREFIX}/tokens?revoked=1`);
          }),
        { params: IdParam, body: OptionalForm },
      )
      .get(
        "/users",
        ({ session, query }) =>
          orErrorPage(session, async () => {
            const page = await usersOnPage(db, query.page);
            const notice = query.added ? { kind: "success" as const, text: "User added." } : null;
            return htmlResponse(usersPage({ session: session!, users: page.data, meta: page.meta, notice }));
          }),
        { query: UsersQuery },
      )
      .post(
        "/users",
        async ({ session, body }) => {
          const form = { name: field(body, "name"), email: field(body, "email") };
          try {
            await db.write((tx) => createUser(tx, form));
            return redirect(`${CONSOLE_PREFIX}/users?added=1`);
          } catch (error) {
            const { status, notice } = formFailure(error);
            const page = await usersOnPage(db, undefined);
            return htmlResponse(usersPage({ session: session!, users: page.data, meta: page.meta, form, notice }), status);
          }
        },
        { body: OptionalForm },
      )
      .get("/*", ({ session }) => htmlResponse(messagePage({ session, title: "Not found", text: "There is no console page at this address." }), 404))
  );
}
