import { Elysia, t } from "elysia";
import { addressOf } from "../../server/http/client-address.ts";
import { CONSOLE_PREFIX } from "../../server/http/conventions.ts";
import { DEVICE_TTL_MS } from "../../server/operators/devices.ts";
import { acceptOperatorLink, completeSetup, endSession, operatorLink, setupCodeUsable, signIn, type SignedIn } from "../../server/operators/service.ts";
import type { Runtime } from "../../server/runtime.ts";
import { randomSecret } from "../../server/shared/crypto.ts";
import { clearCookieHeader, cookieHeader, DEVICE_COOKIE, htmlResponse, PRE_SESSION_COOKIE, readCookie, redirect, SESSION_COOKIE } from "../http.ts";
import { CONSOLE_DETAIL, consoleBase, csrfTokenFor, field, OptionalForm, problemOf, safeNext } from "../shell.ts";
import { invitationTaken, linkPage, loginPage, setupPage } from "./pages.tsx";

const CodeQuery = t.Object({ code: t.Optional(t.String({ maxLength: 200 })) }, { additionalProperties: true });

/** signedInCookies start a session in the browser, trust it as a device of the operator and drop the pre-session cookie. */
const signedInCookies = (signedIn: SignedIn, secure: boolean) => [
  cookieHeader(SESSION_COOKIE, signedIn.session, secure),
  clearCookieHeader(PRE_SESSION_COOKIE, secure),
  cookieHeader(DEVICE_COOKIE, signedIn.device, secure, DEVICE_TTL_MS / 1000),
];

/**
 * authRoutes are sign-in and sessions: the first-run setup link, sign-in and sign-out, and the
 * one-time links with which an invited operator, or one whose password was reset, chooses a password.
 * Forms before sign-in carry a CSRF token derived from a pre-session cookie.
 */
export function authRoutes(rt: Runtime) {
  const db = rt.db;
  /** preSession gives a page's forms their CSRF token, setting the pre-session cookie when there is none yet. */
  const preSession = (csrfSeed: string | undefined, secure: boolean) => {
    const seed = csrfSeed ?? randomSecret();
    return { csrfToken: csrfTokenFor(seed), cookies: csrfSeed ? [] : [cookieHeader(PRE_SESSION_COOKIE, seed, secure)] };
  };
  return new Elysia({ name: "console-auth", prefix: CONSOLE_PREFIX, detail: CONSOLE_DETAIL })
    .use(consoleBase(rt))
    .get(
      "/setup",
      async ({ query, csrfSeed, secure }) => {
        const { csrfToken, cookies } = preSession(csrfSeed, secure);
        const usable = await setupCodeUsable(db, query.code ?? "");
        return htmlResponse(setupPage({ csrfToken, code: query.code ?? "", usable }), usable ? 200 : 403, { cookies });
      },
      { query: CodeQuery },
    )
    .post(
      "/setup",
      async ({ body, csrfSeed, secure }) => {
        const input = { code: field(body, "code"), email: field(body, "email"), password: field(body, "password"), password_again: field(body, "password_again") };
        try {
          return redirect(`${CONSOLE_PREFIX}/`, { cookies: signedInCookies(await completeSetup(db, rt.secrets, input), secure) });
        } catch (error) {
          const failure = problemOf(error);
          const usable = await setupCodeUsable(db, input.code);
          return htmlResponse(setupPage({ csrfToken: csrfTokenFor(csrfSeed!), code: input.code, usable, email: input.email, refusal: failure }), failure.status);
        }
      },
      { body: OptionalForm },
    )
    .get(
      "/login",
      ({ session, csrfSeed, secure, query }) => {
        if (session) return redirect(safeNext(query.next) ?? `${CONSOLE_PREFIX}/`);
        const { csrfToken, cookies } = preSession(csrfSeed, secure);
        return htmlResponse(loginPage({ csrfToken, next: safeNext(query.next) }), 200, { cookies });
      },
      { query: t.Object({ next: t.Optional(t.String({ maxLength: 500 })) }, { additionalProperties: true }) },
    )
    .post(
      "/login",
      async ({ body, csrfSeed, secure, request }) => {
        const email = field(body, "email");
        // Read before signing in: a field refused after it would leave a session no browser holds.
        const next = safeNext(field(body, "next"));
        try {
          const address = addressOf(rt.listening(), request, rt.config.trustedProxies);
          const signedIn = await signIn(db, rt.secrets, { email, password: field(body, "password"), address, device: readCookie(request, DEVICE_COOKIE) });
          return redirect(next ?? `${CONSOLE_PREFIX}/`, { cookies: signedInCookies(signedIn, secure) });
        } catch (error) {
          const failure = problemOf(error);
          return htmlResponse(loginPage({ csrfToken: csrfTokenFor(csrfSeed!), email, next, refusal: failure }), failure.status, {
            headers: failure.headers,
          });
        }
      },
      { body: OptionalForm },
    )
    .get(
      "/welcome",
      async ({ query, csrfSeed, secure }) => {
        const { csrfToken, cookies } = preSession(csrfSeed, secure);
        const link = await operatorLink(db, query.code ?? "");
        return htmlResponse(linkPage({ csrfToken, code: query.code ?? "", link }), link ? (invitationTaken(link) ? 409 : 200) : 403, { cookies });
      },
      { query: CodeQuery },
    )
    .post(
      "/welcome",
      async ({ body, csrfSeed, secure }) => {
        const code = field(body, "code");
        try {
          const signedIn = await acceptOperatorLink(db, rt.secrets, { code, password: field(body, "password"), password_again: field(body, "password_again") });
          return redirect(`${CONSOLE_PREFIX}/`, { cookies: signedInCookies(signedIn, secure) });
        } catch (error) {
          const failure = problemOf(error);
          return htmlResponse(linkPage({ csrfToken: csrfTokenFor(csrfSeed!), code, link: await operatorLink(db, code), refusal: failure }), failure.status);
        }
      },
      { body: OptionalForm },
    )
    // Without a session there is nothing to end: the browser lands on the sign-in page all the same.
    // Only a cookie the request carried is cleared: a post from another site carries none (SameSite=Strict),
    // and clearing it there would sign the operator out without the CSRF token.
    .post(
      "/logout",
      async ({ sessionSecret, secure }) => {
        await endSession(db, sessionSecret);
        return redirect(`${CONSOLE_PREFIX}/login`, { cookies: sessionSecret === undefined ? [] : [clearCookieHeader(SESSION_COOKIE, secure)] });
      },
      { body: OptionalForm },
    );
}
