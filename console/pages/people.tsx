/** @jsxImportSource preact */
import type { ApiTokenInfo } from "../../server/auth/service.ts";
import type { ListMeta } from "../../server/http/list-query.ts";
import type { User } from "../../server/users/model.ts";
import type { ConsoleSession } from "../model.ts";
import { renderPage } from "./layout.tsx";
import { CsrfField, DataTable, NoticeBox, StatusBadge, Time, type NoticeData } from "./parts.tsx";
import { confirmPage, SecretOnce } from "./subscriptions.tsx";

/** tokensPage lists API tokens (never the token itself), creates them (shown once) and links to revoking. */
export function tokensPage(props: { session: ConsoleSession; tokens: ApiTokenInfo[]; created?: { token: string; info: ApiTokenInfo } | null; name?: string; notice?: NoticeData | null }): string {
  return renderPage({
    title: "API tokens",
    session: props.session,
    section: "tokens",
    islands: props.created ? ["copy"] : [],
    children: (
      <>
        <div class="page-head">
          <h1>API tokens</h1>
          <p class="lead">
            Tokens let server-side integrations (a backend job, an import script) call <code>/public/v1</code>. Only a hash is stored. Never put a token in
            browser code.
          </p>
        </div>
        <NoticeBox notice={props.notice} />
        {props.created && (
          <SecretOnce id="new-token" label={`API token “${props.created.info.name}”`} value={props.created.token}>
            Send it as <code>Authorization: Bearer …</code> from server-side code.
          </SecretOnce>
        )}
        <DataTable id="tokens" columns={["Name", "Starts with", "Created (UTC)", "Last used (UTC)", "Status", ""]} empty={props.tokens.length === 0 ? "No API tokens yet." : null}>
          {props.tokens.map((t) => (
            <tr data-token-id={t.id}>
              <td data-label="Name">{t.name}</td>
              <td data-label="Starts with">
                <code>{t.prefix}…</code>
              </td>
              <td data-label="Created">
                <Time value={t.created_at} />
              </td>
              <td data-label="Last used">{t.last_used_at ? <Time value={t.last_used_at} /> : <span class="muted">never</span>}</td>
              <td data-label="Status">
                <StatusBadge status={t.revoked_at ? "revoked" : "active"} />
              </td>
              <td class="row-actions">
                {!t.revoked_at && (
                  <a class="danger-link" href={`/console/tokens/${t.id}/revoke`}>
                    Revoke
                  </a>
                )}
              </td>
            </tr>
          ))}
        </DataTable>
        <section class="card">
          <h2>New API token</h2>
          <form method="post" action="/console/tokens" class="inline-form">
            <CsrfField token={props.session.csrfToken} />
            <label class="grow">
              Name <span class="hint">who or what uses it</span>
              <input type="text" name="name" required maxLength={100} placeholder="nightly-import" value={props.name ?? ""} />
            </label>
            <button type="submit" class="button primary">
              Create token
            </button>
          </form>
        </section>
      </>
    ),
  });
}

/** revokeTokenPage asks to confirm revoking a token. */
export function revokeTokenPage(props: { session: ConsoleSession; token: ApiTokenInfo }): string {
  return confirmPage({
    session: props.session,
    section: "tokens",
    title: "Revoke API token?",
    text: (
      <p>
        Revoke <strong>{props.token.name}</strong> (<code>{props.token.prefix}…</code>)? Every request with it gets 401 from then on. This cannot be undone.
      </p>
    ),
    action: `/console/tokens/${props.token.id}/revoke`,
    button: `Revoke ${props.token.name}`,
    cancel: "/console/tokens",
  });
}

/** usersPage lists the users contacts can be assigned to and adds new ones. */
export function usersPage(props: { session: ConsoleSession; users: User[]; meta: ListMeta; form?: { name: string; email: string }; notice?: NoticeData | null }): string {
  const { meta } = props;
  const form = props.form ?? { name: "", email: "" };
  return renderPage({
    title: "Users",
    session: props.session,
    section: "users",
    children: (
      <>
        <div class="page-head">
          <h1>Users</h1>
          <p class="lead">
            The people contacts can be assigned to (<code>assigned_user_id</code>, <code>assigned_user_ids</code>). They do not sign in here.
          </p>
        </div>
        <NoticeBox notice={props.notice} />
        <DataTable
          id="users"
          columns={["Name", "Email", "Id", "Created (UTC)"]}
          empty={props.users.length === 0 ? "No users yet." : null}
          foot={
            meta.last_page > 1 && (
              <nav class="pager" aria-label="Pages">
                {meta.current_page > 1 ? <a href={`/console/users?page=${meta.current_page - 1}`}>← Previous</a> : <span />}
                <span class="muted">
                  Page {meta.current_page} of {meta.last_page} ({meta.total} users)
                </span>
                {meta.current_page < meta.last_page ? <a href={`/console/users?page=${meta.current_page + 1}`}>Next →</a> : <span />}
              </nav>
            )
          }
        >
          {props.users.map((u) => (
            <tr>
              <td data-label="Name">{u.name}</td>
              <td data-label="Email">{u.email}</td>
              <td data-label="Id">
                <code>{u.id}</code>
              </td>
              <td data-label="Created">
                <Time value={u.created_at} />
              </td>
            </tr>
          ))}
        </DataTable>
        <section class="card">
          <h2>New user</h2>
          <form method="post" action="/console/users" class="inline-form">
            <CsrfField token={props.session.csrfToken} />
            <label class="grow">
              Name
              <input type="text" name="name" required maxLength={200} value={form.name} />
            </label>
            <label class="grow">
              Email
              <input type="email" name="email" required maxLength={254} value={form.email} />
            </label>
            <button type="submit" class="button primary">
              Add user
            </button>
          </form>
        </section>
      </>
    ),
  });
}
