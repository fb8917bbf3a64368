/** @jsxImportSource preact */
import type { ComponentChildren } from "preact";
import { fieldNameOf, fieldWords } from "../../server/http/schema-errors.ts";
import type { FieldError, ProblemError } from "../../server/shared/problem.ts";
import type { SecretShape } from "../addresses.ts";
import type { ConsoleSession } from "../model.ts";
import { renderPage, type Section } from "./layout.tsx";
import { CsrfField, fieldId, reasonMarks, WithReason, type NoticeData } from "./parts.tsx";

/**
 * SecretOnce shows a secret that is never shown again, with a copy button added by the copy island,
 * under a heading saying what was done; `label` names the secret's field. The section takes
 * the focus as the page loads (autofocus: the console's CSP runs no inline script), so a screen
 * reader reads what was done and that the secret must be copied now, and the next Tab reaches it,
 * unless the page's notice takes the focus instead (`focused` false): one autofocus to a page.
 */
export function SecretOnce({ id, label, value, heading, focused = true, children }: { id: string; label: string; value: string; heading: string; focused?: boolean; children?: ComponentChildren }) {
  return (
    <section class="card secret" aria-labelledby={`${id}-heading`} aria-describedby={`${id}-once`} tabIndex={focused ? -1 : undefined} autofocus={focused}>
      <h2 id={`${id}-heading`}>{heading}</h2>
      <p id={`${id}-once`}>
        <strong>Copy it now: it is shown only this once.</strong> {children}
      </p>
      <div class="secret-row">
        <input id={id} class="mono" type="text" readOnly value={value} aria-label={label} spellcheck={false} />
        <span data-copy-for={id} class="copy" />
      </div>
    </section>
  );
}

/** confirmPage asks before something that cannot be undone (deleting a subscription, revoking a token); with a form key, its form carries it (onceForForm), and `choices` are fields sent with it (boxes to tick). */
export function confirmPage(props: { session: ConsoleSession; title: string; section: Section; text: ComponentChildren; action: string; button: string; cancel: string; formKey?: string; choices?: ComponentChildren }): string {
  return renderPage({
    title: props.title,
    session: props.session,
    section: props.section,
    children: (
      <section class="card message">
        <h1>{props.title}</h1>
        {props.text}
        <form method="post" action={props.action} class="actions">
          <CsrfField token={props.session.csrfToken} />
          {props.formKey && <input type="hidden" name="form_key" value={props.formKey} />}
          {props.choices}
          <button type="submit" class="button danger">
            {props.button}
          </button>
          <a class="button ghost" href={props.cancel}>
            Cancel
          </a>
        </form>
      </section>
    ),
  });
}

/** Refusal is why a service refused a form: the problem's detail and the fields it names with their reasons, the API's errors[]. */
export type Refusal = Pick<ProblemError, "message" | "errors">;

/** reasonOf is what a refusal says of one field, in the API's words (its errors about it, joined), or null when it does not name the field. */
export function reasonOf(refusal: Refusal | null | undefined, name: string): string | null {
  const details = (refusal?.errors ?? []).filter((error) => fieldNameOf(error) === name).map((error) => error.detail);
  return details.length > 0 ? details.join("; ") : null;
}

/** fieldMarks are the attributes of a field its form's refusal names (reasonMarks); none for any other field. */
export function fieldMarks(refusal: Refusal | null | undefined, name: string): ReturnType<typeof reasonMarks> {
  return reasonMarks(name, reasonOf(refusal, name));
}

/** FieldWithReason is a field and, when its form's refusal names it, the reason beside it (WithReason). `className` is the field's own layout class. */
export function FieldWithReason({ refusal, name, className, children }: { refusal: Refusal | null | undefined; name: string; className?: string; children: ComponentChildren }) {
  return (
    <WithReason name={name} reason={reasonOf(refusal, name)} className={className}>
      {children}
    </WithReason>
  );
}

/**
 * RefusalSummary heads a refused form: each error about one of its `fields`, in the API's words
 * and linked to the field, or the problem's detail when it names none of them (or more than them).
 * It takes the focus as the page loads (autofocus: the console's CSP runs no inline script), so
 * keyboard and screen-reader users start at what to correct, not at the top of the page.
 */
export function RefusalSummary({ refusal, fields }: { refusal: Refusal | null | undefined; fields: readonly string[] }) {
  if (!refusal) return null;
  const errors = refusal.errors ?? [];
  const named = errors.filter((error) => fields.includes(fieldNameOf(error)));
  // A reason that is the problem's detail (a conflict put on its field: refusedOnField) is a sentence already.
  const words = (error: FieldError) => (error.detail === refusal.message ? error.detail : `${fieldWords(error)}.`);
  const list = (
    <ul class="refusal-fields">
      {named.map((error) => (
        <li>
          <a href={`#${fieldId(fieldNameOf(error))}`}>{words(error)}</a>
        </li>
      ))}
    </ul>
  );
  return (
    // Focused as the page loads, so it is read out once: no role=alert, which would read it again.
    <div class="notice notice-error" tabIndex={-1} autofocus id="refusal">
      {named.length === 0 ? (
        refusal.message
      ) : named.length === errors.length ? (
        list
      ) : (
        <>
          <p>{refusal.message}</p>
          {list}
        </>
      )}
    </div>
  );
}

const SECRET_WORDS: Record<SecretShape, { what: string; advice: string }> = {
  "api-token": { what: "an API token (crm_…)", advice: "if it is a real token, revoke it (API tokens, Revoke) and create another" },
  "signing-secret": { what: "a webhook signing secret (whsec_…)", advice: "if it is a real secret, rotate it (Subscriptions, Rotate, Rotate the secret)" },
};

/**
 * secretNotice says that what was typed into a search looks like a token or a signing secret and
 * was not searched, where it went and where not (`inAddress`: it came in a link, not from a form),
 * and what to do if it was real. The page shows its field empty.
 */
export function secretNotice(secret: SecretShape, inAddress: boolean): NoticeData {
  const { what, advice } = SECRET_WORDS[secret];
  const where = inAddress
    ? "it was not searched or logged, but it is in this page's address, and so in the browser's history and the log of any proxy on the way"
    : "it was not searched, and it was not logged or put in the page's address";
  return { kind: "error", text: `This looks like ${what}: ${where}. ${advice[0]!.toUpperCase()}${advice.slice(1)}.` };
}

/** secretReason is a filter field's reason when its value looks like a token or a signing secret: it was not used, and what to do if it was real. */
export function secretReason(secret: SecretShape): string {
  const { what, advice } = SECRET_WORDS[secret];
  return `looks like ${what}: it was not used, logged or put in the page's address; ${advice}`;
}

/** expiredNotice says that a sealed address (a search's, `what`) no longer opens: an hour after it was made, or in another sign-in. */
export function expiredNotice(what: "search" | "filter"): NoticeData {
  return {
    kind: "error",
    text:
      what === "search"
        ? "This search has expired: its address opens for an hour after the search, and only in the sign-in that made it. Search again."
        : "These filters have expired: their address opens for an hour after they were sent, and only in the sign-in that sent them. Filter again.",
  };
}
