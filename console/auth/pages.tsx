/** @jsxImportSource preact */
import { MIN_OPERATOR_PASSWORD_LENGTH } from "../../server/limits/limits.ts";
import type { OperatorLink } from "../../server/operators/model.ts";
import type { ConsoleSession } from "../model.ts";
import { renderPage } from "../pages/layout.tsx";
import { fieldMarks, FieldWithReason, RefusalSummary, type Refusal } from "../pages/forms.tsx";
import { CsrfField, isolated, NoticeBox } from "../pages/parts.tsx";

/** EmailField is the operator's email of the sign-in and setup forms, focused as the page loads (unless a refusal's summary takes the focus first). */
function EmailField({ email, refusal }: { email: string | undefined; refusal: Refusal | null | undefined }) {
  return (
    <FieldWithReason refusal={refusal} name="email">
      <label>
        Email
        <input type="email" name="email" autocomplete="username" required value={email ?? ""} autofocus {...fieldMarks(refusal, "email")} />
      </label>
    </FieldWithReason>
  );
}

/** loginPage renders the sign-in form. */
export function loginPage(props: { csrfToken: string; email?: string; next?: string; refusal?: Refusal | null }): string {
  return renderPage({
    title: "Sign in",
    session: null,
    children: (
      <section class="card auth">
        <h1>Sign in</h1>
        <p class="muted">Operators only. Ask an administrator for an account, or run <code>crm operator create</code>.</p>
        <RefusalSummary refusal={props.refusal} fields={["email", "password"]} />
        <form method="post" action="/console/login" class="stack">
          <CsrfField token={props.csrfToken} />
          {props.next && <input type="hidden" name="next" value={props.next} />}
          <EmailField email={props.email} refusal={props.refusal} />
          <FieldWithReason refusal={props.refusal} name="password">
            <label>
              Password
              <input type="password" name="password" autocomplete="current-password" required {...fieldMarks(props.refusal, "password")} />
            </label>
          </FieldWithReason>
          <button type="submit" class="button primary">
            Sign in
          </button>
        </form>
      </section>
    ),
  });
}

/** setupPage renders the first-run form that creates the first operator, or says why the link does not work. */
export function setupPage(props: { csrfToken: string; code: string; usable: boolean; email?: string; refusal?: Refusal | null }): string {
  return renderPage({
    title: "Set up the console",
    session: null,
    children: (
      <section class="card auth">
        <h1>Create the first operator</h1>
        {props.usable ? (
          <>
            <p class="muted">This one-time link works for 30 minutes. The account you create here can sign in to the console.</p>
            <RefusalSummary refusal={props.refusal} fields={["email", "password", "password_again"]} />
            <form method="post" action="/console/setup" class="stack">
              <CsrfField token={props.csrfToken} />
              <input type="hidden" name="code" value={props.code} />
              <EmailField email={props.email} refusal={props.refusal} />
              <FieldWithReason refusal={props.refusal} name="password">
                <label>
                  Password <span class="hint">at least 10 characters</span>
                  <input type="password" name="password" autocomplete="new-password" minLength={10} required {...fieldMarks(props.refusal, "password")} />
                </label>
              </FieldWithReason>
              <FieldWithReason refusal={props.refusal} name="password_again">
                <label>
                  Password again
                  <input type="password" name="password_again" autocomplete="new-password" minLength={10} required {...fieldMarks(props.refusal, "password_again")} />
                </label>
              </FieldWithReason>
              <button type="submit" class="button primary">
                Create operator and sign in
              </button>
            </form>
          </>
        ) : (
          <NoticeBox
            notice={{
              kind: "error",
              text: "This setup link is invalid, expired or already used. Restart the server for a new link (it is printed while no operator exists), or run: crm operator create --email E --password-stdin",
            }}
          />
        )}
      </section>
    ),
  });
}

/** messagePage renders an error or information page (403, 404, 409...). */
export function messagePage(props: { session: ConsoleSession | null; title: string; text: string; back?: { href: string; label: string } }): string {
  return renderPage({
    title: props.title,
    session: props.session,
    children: (
      <section class="card message">
        <h1>{props.title}</h1>
        <p>{props.text}</p>
        <p>
          <a class="button" href={props.back?.href ?? "/console/"}>
            {props.back?.label ?? "Back to the console"}
          </a>
        </p>
      </section>
    ),
  });
}

/** invitationTaken tells whether a one-time link is an invitation whose email is an operator's already, which cannot be accepted. */
export function invitationTaken(link: OperatorLink): boolean {
  return link.purpose === "invite" && link.operator_exists;
}

/**
 * linkPage renders the form of a one-time link: an invited operator, or one whose password was
 * reset, chooses a password. An invitation whose email is an operator's already asks for no
 * password, which could not be used, and offers to sign in instead.
 */
export function linkPage(props: { csrfToken: string; code: string; link: OperatorLink | null; refusal?: Refusal | null }): string {
  const invite = props.link?.purpose === "invite";
  return renderPage({
    title: invite ? "Join the console" : "Choose a new password",
    session: null,
    children: (
      <section class="card auth">
        <h1>{invite ? "Join the console" : "Choose a new password"}</h1>
        {props.link && invitationTaken(props.link) ? (
          <>
            <NoticeBox
              notice={{
                kind: "error",
                text: `An operator with the email ${isolated(props.link.email)} exists already, so this invitation cannot be used. Sign in with that operator's password; if it is lost, ask an operator for a password reset link.`,
              }}
            />
            <a class="button primary" href="/console/login">
              Sign in
            </a>
          </>
        ) : props.link ? (
          <>
            <p class="muted">
              {invite ? "You were invited as an operator with the email " : "A new password for "}
              <strong>{props.link.email}</strong>. This one-time link works once.
            </p>
            <RefusalSummary refusal={props.refusal} fields={["password", "password_again"]} />
            <form method="post" action="/console/welcome" class="stack">
              <CsrfField token={props.csrfToken} />
              <input type="hidden" name="code" value={props.code} />
              <input type="email" name="email" autocomplete="username" value={props.link.email} hidden readOnly />
              <FieldWithReason refusal={props.refusal} name="password">
                <label>
                  Password <span class="hint">at least {MIN_OPERATOR_PASSWORD_LENGTH} characters</span>
                  <input type="password" name="password" autocomplete="new-password" minLength={MIN_OPERATOR_PASSWORD_LENGTH} required autofocus {...fieldMarks(props.refusal, "password")} />
                </label>
              </FieldWithReason>
              <FieldWithReason refusal={props.refusal} name="password_again">
                <label>
                  Password again
                  <input type="password" name="password_again" autocomplete="new-password" minLength={MIN_OPERATOR_PASSWORD_LENGTH} required {...fieldMarks(props.refusal, "password_again")} />
                </label>
              </FieldWithReason>
              <button type="submit" class="button primary">
                {invite ? "Create my account and sign in" : "Set the password and sign in"}
              </button>
            </form>
          </>
        ) : (
          <NoticeBox notice={{ kind: "error", text: "This link is invalid, expired or already used. Ask an operator for a new one." }} />
        )}
      </section>
    ),
  });
}
