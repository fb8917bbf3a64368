/** @jsxImportSource preact */
import type { ComponentChildren } from "preact";
import type { ConsoleSession } from "../model.ts";
import { renderPage, type Section } from "./layout.tsx";
import { CsrfField } from "./parts.tsx";

/** SecretOnce shows a secret that is never shown again, with a copy button added by the copy island. */
export function SecretOnce({ id, label, value, children }: { id: string; label: string; value: string; children?: ComponentChildren }) {
  return (
    <section class="card secret" aria-labelledby={`${id}-label`}>
      <h2 id={`${id}-label`}>{label}</h2>
      <p>
        <strong>Copy it now: it is shown only this once.</strong> {children}
      </p>
      <div class="secret-row">
        <input id={id} class="mono" type="text" readOnly value={value} aria-label={label} spellcheck={false} />
        <span data-copy-for={id} />
      </div>
    </section>
  );
}

/** confirmPage asks before something that cannot be undone (deleting a subscription, revoking a token); with a form key, its form carries it (onceForForm). */
export function confirmPage(props: { session: ConsoleSession; title: string; section: Section; text: ComponentChildren; action: string; button: string; cancel: string; formKey?: string }): string {
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
