import { Elysia, t } from "elysia";
import { listTokens, makerNames } from "../../server/auth/service.ts";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { originOf } from "../../server/http/request-log.ts";
import { findOperator, operatorSummaries, pendingLinks, withdrawOperatorLink } from "../../server/operators/service.ts";
import { operatorMade } from "../../server/operators/removal.ts";
import type { Runtime } from "../../server/runtime.ts";
import { notFound, ProblemError } from "../../server/shared/problem.ts";
import { getUser } from "../../server/users/service.ts";
import { clearCookieHeader, htmlResponse, redirect, SESSION_COOKIE } from "../http.ts";
import type { Refusal } from "../pages/forms.tsx";
import type { NoticeData } from "../pages/parts.tsx";
import { CONSOLE_DETAIL, countOf, field, flagQuery, IdParam, OptionalForm, problemOf, refusedOnField, signedInConsole } from "../shell.ts";
import { deleteUserPage, operatorsPage, removeOperatorPage, resetPasswordPage, revokeTokenPage, tokensPage, usersPage, withdrawLinkPage, type OneTimeLink } from "./pages.tsx";
import { addUserFromForm, contactsAssignedTo, createTokenFromForm, deleteUserFromForm, inviteFromForm, resetLinkFromForm, removeOperatorFromForm, revokeTokenFromConsole, usersOnPage } from "./service.ts";

const UsersQuery = t.Object(
  { page: t.Optional(t.String({ maxLength: 20 })), added: t.Optional(t.String({ maxLength: 10 })), deleted: t.Optional(t.String({ maxLength: 10 })), unassigned: t.Optional(t.String({ maxLength: 10 })) },
  { additionalProperties: true },
);

/** unassignedText says how many contacts a user's delete took the assignment from, as its redirect wrote (nothing for a hand-made value). */
function unassignedText(unassigned: string | undefined): string {
  if (unassigned === undefined || !/^\d{1,9}$/.test(unassigned)) return "";
  const n = Number(unassigned);
  return n === 0 ? " No contact was assigned to them." : n === 1 ? " 1 contact lost the assignment; it sends contact.updated." : ` ${n} contacts lost the assignment; each sends contact.updated.`;
}

/** madeAlsoText says what a removal also revoked and disabled, as its redirect wrote (nothing when neither, or for a hand-made value). */
function madeAlsoText(query: { revoked?: string; disabled?: string }): string {
  const [revoked, disabled] = [countOf(query.revoked), countOf(query.disabled)];
  const parts = [
    ...(revoked ? [`${revoked === 1 ? "1 API token" : `${revoked} API tokens`} they made ${revoked === 1 ? "is" : "are"} revoked (requests with ${revoked === 1 ? "it" : "them"} get 401)`] : []),
    ...(disabled ? [`${disabled === 1 ? "1 subscription" : `${disabled} subscriptions`} they made ${disabled === 1 ? "is" : "are"} disabled`] : []),
  ];
  return parts.length > 0 ? ` ${parts.join("; ")}.` : "";
}

/** operatorsNotice says what the redirect to the operators page after a removal or a withdrawal reports (nothing for a hand-made value). */
function operatorsNotice(query: { removed?: string; withdrawn?: string; revoked?: string; disabled?: string }): NoticeData | null {
  if (query.removed) return { kind: "success", text: `Operator removed. Their sessions have ended, and the links they made no longer work.${madeAlsoText(query)}` };
  if (query.withdrawn === "1") return { kind: "success", text: "Link withdrawn. It no longer works." };
  if (query.withdrawn === "0") return { kind: "info", text: "That link was no longer pending (used, withdrawn, replaced by a newer one or expired); nothing was withdrawn." };
  return null;
}

/** peopleRoutes are who may do what: API tokens, the users contacts are assigned to, and the console's operators. */
export function peopleRoutes(rt: Runtime) {
  const db = rt.db;
  /**
   * linkUrl is the address of a one-time link on the server the operator is using, in the scheme
   * their browser used (`secure`, as for the cookies): behind a proxy that terminates TLS the
   * request's own URL is http, and an http link would send the code in cleartext.
   */
  const linkUrl = (request: Request, secure: boolean, code: string) => `${secure ? "https" : "http"}://${new URL(request.url).host}${CONSOLE_PREFIX}/welcome?code=${code}`;
  /** operatorsView renders the operators page with a link just made or a form's problem. */
  const operatorsView = async (session: Parameters<typeof operatorsPage>[0]["session"], extras: { link?: OneTimeLink; email?: string; notice?: NoticeData | null; refusal?: Refusal } = {}) =>
    operatorsPage({ session, operators: await operatorSummaries(db), links: await pendingLinks(db), ...extras });
  const operatorOr404 = async (id: string) => {
    const operator = await findOperator(db, id);
    if (!operator) throw notFound("operator", id);
    return operator;
  };
  return new Elysia({ name: "console-people", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(signedInConsole(rt))
    .get(
      "/tokens",
      async ({ session, query }) => {
        const notice = query.revoked ? { kind: "success" as const, text: "Token revoked. Requests with it now get 401." } : null;
        return htmlResponse(tokensPage({ session, tokens: await listTokens(db), names: await makerNames(db), notice }));
      },
      { query: flagQuery("revoked") },
    )
    .post(
      "/tokens",
      async ({ session, body }) => {
        let name: string | undefined;
        try {
          name = field(body, "name");
          const created = await createTokenFromForm(db, session.operator, name);
          return htmlResponse(tokensPage({ session, tokens: await listTokens(db), names: await makerNames(db), created }), 201);
        } catch (error) {
          const failure = problemOf(error);
          return htmlResponse(tokensPage({ session, tokens: await listTokens(db), names: await makerNames(db), name, refusal: failure }), failure.status);
        }
      },
      { body: OptionalForm },
    )
    .get(
      "/tokens/:id/revoke",
      async ({ session, params }) => {
        const token = (await listTokens(db)).find((tk) => tk.id === params.id && tk.revoked_at === null);
        if (!token) throw new ProblemError(404, "not-found", "No active API token with this id exists.");
        return htmlResponse(revokeTokenPage({ session, token }));
      },
      { params: IdParam },
    )
    .post(
      "/tokens/:id/revoke",
      async ({ params }) => {
        await revokeTokenFromConsole(rt, params.id);
        return redirect(`${CONSOLE_PREFIX}/tokens?revoked=1`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .get(
      "/users",
      async ({ session, query }) => {
        const page = await usersOnPage(rt, query);
        const notice = query.added
          ? { kind: "success" as const, text: "User added." }
          : query.deleted
            ? { kind: "success" as const, text: `User deleted.${unassignedText(query.unassigned)}` }
            : null;
        return htmlResponse(usersPage({ session, users: page.data, meta: page.meta, notice }));
      },
      { query: UsersQuery },
    )
    .post(
      "/users",
      async ({ session, body }) => {
        let form: { name: string; email: string } | undefined;
        try {
          // Spaces typed around a name or email are dropped, as a form's slip (the API stores names
          // as given), and a refused form shows the values checked: a name of spaces alone is empty.
          form = { name: field(body, "name").trim(), email: field(body, "email").trim() };
          await addUserFromForm(rt, session, form, field(body, "form_key"));
          return redirect(`${CONSOLE_PREFIX}/users?added=1`);
        } catch (error) {
          const failure = problemOf(error);
          const page = await usersOnPage(rt);
          return htmlResponse(usersPage({ session, users: page.data, meta: page.meta, form, refusal: failure }), failure.status);
        }
      },
      { body: OptionalForm },
    )
    .get("/users/:id/delete", async ({ session, params }) => htmlResponse(deleteUserPage({ session, user: await getUser(db, params.id), assigned: await contactsAssignedTo(db, params.id) })), { params: IdParam })
    .post(
      "/users/:id/delete",
      async ({ request, session, params, body }) => {
        const { unassigned } = await deleteUserFromForm(rt, session, params.id, field(body, "form_key"), originOf(request));
        return redirect(`${CONSOLE_PREFIX}/users?deleted=1&unassigned=${unassigned}`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .get(
      "/operators",
      async ({ session, query }) => {
        return htmlResponse(await operatorsView(session, { notice: operatorsNotice(query) }));
      },
      { query: t.Object(Object.fromEntries(["removed", "withdrawn", "revoked", "disabled"].map((flag) => [flag, t.Optional(t.String({ maxLength: 10 }))])), { additionalProperties: true }) },
    )
    .post(
      "/operators/links/withdraw",
      async ({ session, body }) => {
        const purpose = field(body, "link_purpose");
        if (purpose !== "invite" && purpose !== "reset") throw new ProblemError(404, "not-found", "No pending link of this kind exists.");
        const link = { purpose, email: field(body, "link_email"), created_at: field(body, "link_created_at") } as const;
        // The row's button asks first, as every action of the console that cannot be undone does; the confirm page's button says yes.
        if (field(body, "confirm") !== "yes") return htmlResponse(withdrawLinkPage({ session, link }));
        const withdrawn = await withdrawOperatorLink(db, link);
        return redirect(`${CONSOLE_PREFIX}/operators?withdrawn=${withdrawn ? "1" : "0"}`);
      },
      { body: OptionalForm },
    )
    .post(
      "/operators",
      async ({ session, body, request, secure }) => {
        let email: string | undefined;
        try {
          email = field(body, "email");
          const invited = await refusedOnField(inviteFromForm(rt, session, email, field(body, "form_key")), "operator-exists", "email");
          return htmlResponse(await operatorsView(session, { link: { purpose: "invite", email: invited.email, url: linkUrl(request, secure, invited.code) } }), 201);
        } catch (error) {
          const failure = problemOf(error);
          return htmlResponse(await operatorsView(session, { email, refusal: failure }), failure.status);
        }
      },
      { body: OptionalForm },
    )
    .get(
      "/operators/:id/remove",
      async ({ session, params }) => {
        const operator = await operatorOr404(params.id);
        return htmlResponse(removeOperatorPage({ session, operator, made: await operatorMade(db, operator.id) }));
      },
      { params: IdParam },
    )
    .post(
      "/operators/:id/remove",
      async ({ request, session, params, body, secure }) => {
        const choices = { revokeTokens: field(body, "revoke_tokens") === "yes", disableSubscriptions: field(body, "disable_subscriptions") === "yes" };
        const done = await removeOperatorFromForm(rt, session, params.id, field(body, "form_key"), choices, originOf(request));
        // Removing oneself ends one's own session too: the browser goes to the sign-in page.
        if (params.id === session.operator.id) return redirect(`${CONSOLE_PREFIX}/login`, { cookies: [clearCookieHeader(SESSION_COOKIE, secure)] });
        const also = `${done.tokens > 0 ? `&revoked=${done.tokens}` : ""}${done.subscriptions > 0 ? `&disabled=${done.subscriptions}` : ""}`;
        return redirect(`${CONSOLE_PREFIX}/operators?removed=1${also}`);
      },
      { params: IdParam, body: OptionalForm },
    )
    .get("/operators/:id/reset-password", async ({ session, params }) => htmlResponse(resetPasswordPage({ session, operator: await operatorOr404(params.id) })), { params: IdParam })
    .post(
      "/operators/:id/reset-password",
      async ({ session, params, request, secure, body }) => {
        const { operator, code } = await resetLinkFromForm(rt, session, params.id, field(body, "form_key"));
        return htmlResponse(await operatorsView(session, { link: { purpose: "reset", email: operator.email, url: linkUrl(request, secure, code) } }), 201);
      },
      { params: IdParam, body: OptionalForm },
    );
}
