/** @jsxImportSource preact */
import type { ApiTokenInfo } from "../../server/auth/service.ts";
import { MADE_BY_WORDS, type MakerNames } from "../../server/shared/made-by.ts";
import type { ListMeta } from "../../server/http/list-query.ts";
import type { Operator, OperatorSummary, PendingLink } from "../../server/operators/model.ts";
import type { User } from "../../server/users/model.ts";
import type { ConsoleSession } from "../model.ts";
import type { OperatorMade } from "../../server/operators/removal.ts";
import { renderPage } from "../pages/layout.tsx";
import { bidiBalanced, CsrfField, DataTable, NoticeBox, RowSubject, StatusBadge, SubscriptionLabel, tally, Time, type NoticeData } from "../pages/parts.tsx";
import { MakerLink } from "../pages/made-by.tsx";
import { confirmPage, fieldMarks, FieldWithReason, RefusalSummary, SecretOnce, type Refusal } from "../pages/forms.tsx";

/**
 * revokeSubjects names each listed token for its Revoke link, in words hidden from sight, so that no
 * two links read alike: its name, followed by the start it is shown by when another token has the
 * same name (token names need not differ).
 */
function revokeSubjects(tokens: ApiTokenInfo[]): Map<string, string> {
  const named = tally(tokens, (t) => t.name);
  return new Map(tokens.map((t) => [t.id, named.get(t.name) === 1 ? t.name : `${t.name} starting ${t.prefix}`]));
}

/** tokensPage lists API tokens (never the token itself), creates them (shown once) and links to revoking. */
export function tokensPage(props: { session: ConsoleSession; tokens: ApiTokenInfo[]; names: MakerNames; created?: { token: string; info: ApiTokenInfo } | null; name?: string; notice?: NoticeData | null; refusal?: Refusal | null }): string {
  const subjects = revokeSubjects(props.tokens);
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
          <SecretOnce id="new-token" label={`API token “${props.created.info.name}”`} heading={`API token “${props.created.info.name}” created`} value={props.created.token}>
            Send it as <code>Authorization: Bearer …</code> from server-side code.
          </SecretOnce>
        )}
        <DataTable id="tokens" columns={["Name", "Starts with", "Made by", "Created (UTC)", "Last used (UTC)", "Status", ""]} empty={props.tokens.length === 0 ? "No API tokens yet." : null}>
          {props.tokens.map((t) => (
            <tr id={t.id} data-token-id={t.id}>
              <td data-label="Name">
                <span class="chosen">{t.name}</span>
              </td>
              <td data-label="Starts with">
                <code>{t.prefix}…</code>
              </td>
              <td data-label="Made by">
                <MakerLink madeBy={t.made_by} names={props.names} />
              </td>
              <td data-label="Created">
                <Time value={t.created_at} zone={false} />
              </td>
              <td data-label="Last used">{t.last_used_at ? <Time value={t.last_used_at} zone={false} /> : <span class="muted">never</span>}</td>
              <td data-label="Status">
                <StatusBadge status={t.revoked_at ? "revoked" : "active"} />
              </td>
              <td class="row-actions">
                {!t.revoked_at && (
                  <a class="danger-link" href={`/console/tokens/${t.id}/revoke`}>
                    Revoke<RowSubject>token {subjects.get(t.id)}</RowSubject>
                  </a>
                )}
              </td>
            </tr>
          ))}
        </DataTable>
        <section class="card">
          <h2>New API token</h2>
          <RefusalSummary refusal={props.refusal} fields={["name"]} />
          <form method="post" action="/console/tokens" class="inline-form">
            <CsrfField token={props.session.csrfToken} />
            <FieldWithReason refusal={props.refusal} name="name" className="grow">
              <label class="grow">
                Name <span class="hint">who or what uses it</span>
                <input type="text" name="name" required maxLength={100} placeholder="nightly-import" value={props.name ?? ""} {...fieldMarks(props.refusal, "name")} />
              </label>
            </FieldWithReason>
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
export function usersPage(props: { session: ConsoleSession; users: User[]; meta: ListMeta; form?: { name: string; email: string }; notice?: NoticeData | null; refusal?: Refusal | null }): string {
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
          columns={["Name", "Email", "Id", "Created (UTC)", ""]}
          empty={props.users.length === 0 ? (meta.total === 0 ? "No users yet." : `No users on page ${meta.current_page}: the last page is ${meta.last_page}.`) : null}
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
              <td data-label="Name">
                <span class="chosen">{u.name}</span>
              </td>
              <td data-label="Email">
                <span class="chosen">{u.email}</span>
              </td>
              <td data-label="Id">
                <code>{u.id}</code>
              </td>
              <td data-label="Created">
                <Time value={u.created_at} zone={false} />
              </td>
              <td class="row-actions">
                <a href={`/console/contacts?assigned_user_id=${u.id}`}>
                  Contacts<RowSubject>of user {u.email}</RowSubject>
                </a>
                <a class="danger-link" href={`/console/users/${u.id}/delete`}>
                  Delete<RowSubject>user {u.email}</RowSubject>
                </a>
              </td>
            </tr>
          ))}
        </DataTable>
        <section class="card">
          <h2>New user</h2>
          <RefusalSummary refusal={props.refusal} fields={["name", "email"]} />
          <form method="post" action="/console/users" class="inline-form">
            <CsrfField token={props.session.csrfToken} />
            <input type="hidden" name="form_key" value={crypto.randomUUID()} />
            <FieldWithReason refusal={props.refusal} name="name" className="grow">
              <label class="grow">
                Name
                <input type="text" name="name" required maxLength={200} value={form.name} {...fieldMarks(props.refusal, "name")} />
              </label>
            </FieldWithReason>
            <FieldWithReason refusal={props.refusal} name="email" className="grow">
              <label class="grow">
                Email
                <input type="email" name="email" required maxLength={254} value={form.email} {...fieldMarks(props.refusal, "email")} />
              </label>
            </FieldWithReason>
            <button type="submit" class="button primary">
              Add user
            </button>
          </form>
        </section>
      </>
    ),
  });
}

/** deleteUserPage asks to confirm deleting a user, saying how many contacts are assigned to them. */
export function deleteUserPage(props: { session: ConsoleSession; user: User; assigned: number }): string {
  const { assigned } = props;
  return confirmPage({
    session: props.session,
    section: "users",
    title: "Delete user?",
    formKey: crypto.randomUUID(),
    text: (
      <p>
        Delete <bdi>{bidiBalanced(props.user.name)}</bdi> (<strong>{bidiBalanced(props.user.email)}</strong>)?{" "}
        {assigned === 0 ? (
          "No contact is assigned to them."
        ) : (
          <>
            {assigned === 1 ? "1 contact is" : `${assigned} contacts are`} assigned to them (as <code>assigned_user_id</code> or in <code>assigned_user_ids</code>):{" "}
            {assigned === 1 ? "it stays, no longer assigned to them, and sends" : "they stay, no longer assigned to them, and each sends"} <code>contact.updated</code>.
          </>
        )}{" "}
        This cannot be undone.
      </p>
    ),
    action: `/console/users/${props.user.id}/delete`,
    button: `Delete ${props.user.email}`,
    cancel: "/console/users",
  });
}

/** OneTimeLink is a link made on the operators page: shown once, to be handed to its person. */
export interface OneTimeLink {
  purpose: "invite" | "reset";
  email: string;
  url: string;
}

/** linkLabel names a one-time link by what it is for and whom. */
const linkLabel = (link: OneTimeLink) => (link.purpose === "invite" ? `Invitation for ${link.email}` : `Password reset link for ${link.email}`);

/** pendingLinkLabel names a pending link by what it is for and whom, as its row's Withdraw button says to a screen reader. */
const pendingLinkLabel = (link: Pick<PendingLink, "purpose" | "email">) => (link.purpose === "invite" ? `invitation for ${link.email}` : `password reset link for ${link.email}`);

/** operatorsPage lists the operators and the links not used yet (each to withdraw), shows a link just made (once), and invites a new operator. */
export function operatorsPage(props: {
  session: ConsoleSession;
  operators: OperatorSummary[];
  links: PendingLink[];
  link?: OneTimeLink | null;
  email?: string;
  notice?: NoticeData | null;
  refusal?: Refusal | null;
}): string {
  return renderPage({
    title: "Operators",
    session: props.session,
    section: "operators",
    islands: props.link ? ["copy"] : [],
    children: (
      <>
        <div class="page-head">
          <h1>Operators</h1>
          <p class="lead">
            The people who sign in to this console. The same from the command line: <code>crm operator list</code>, <code>create</code>, <code>remove</code>, <code>reset-password</code>.
          </p>
        </div>
        <NoticeBox notice={props.notice} />
        {props.link && (
          <SecretOnce id="operator-link" label={linkLabel(props.link)} heading={`${linkLabel(props.link)} made`} value={props.link.url}>
            Send it to {props.link.email} yourself; it works once, for 72 hours.
          </SecretOnce>
        )}
        <DataTable id="operators" columns={["Email", "Id", "Added (UTC)", "Last seen (UTC)", ""]} empty={null}>
          {props.operators.map((o) => (
            <tr id={o.id} data-operator-id={o.id}>
              <td data-label="Email">
                {o.email} {o.id === props.session.operator.id && <span class="tag">you</span>}
              </td>
              <td data-label="Id">
                <code>{o.id}</code>
              </td>
              <td data-label="Added">
                <Time value={o.created_at} zone={false} />
              </td>
              <td data-label="Last seen">
                <Time value={o.last_seen_at} zone={false} />
              </td>
              <td class="row-actions">
                <a href={`/console/operators/${o.id}/reset-password`}>
                  Reset password<RowSubject>of {o.email}</RowSubject>
                </a>
                {props.operators.length > 1 && (
                  <a class="danger-text" href={`/console/operators/${o.id}/remove`}>
                    Remove<RowSubject>operator {o.email}</RowSubject>
                  </a>
                )}
              </td>
            </tr>
          ))}
        </DataTable>
        {props.links.length > 0 && (
          <DataTable
            id="links"
            columns={["For", "Link", "Made by", "Sent (UTC)", "Expires (UTC)", ""]}
            empty={null}
            head={
              <div class="card-head">
                <h2>Links not used yet</h2>
              </div>
            }
          >
            {props.links.map((l) => (
              <tr>
                <td data-label="For">{l.email}</td>
                <td data-label="Link">{l.purpose === "invite" ? "Invitation" : "Password reset"}</td>
                <td data-label="Made by">{l.created_by ?? <span class="muted">{MADE_BY_WORDS.commandLine}</span>}</td>
                <td data-label="Sent">
                  <Time value={l.created_at} zone={false} />
                </td>
                <td data-label="Expires">
                  <Time value={l.expires_at} zone={false} />
                </td>
                <td class="row-actions">
                  <form method="post" action="/console/operators/links/withdraw" class="row-form">
                    <CsrfField token={props.session.csrfToken} />
                    <LinkFields link={l} />
                    <button type="submit" class="link-button danger-text">
                      Withdraw<RowSubject>{pendingLinkLabel(l)}</RowSubject>
                    </button>
                  </form>
                </td>
              </tr>
            ))}
          </DataTable>
        )}
        <section class="card">
          <h2>Invite an operator</h2>
          <p class="muted">You get a one-time link to send; with it they choose their password and sign in.</p>
          <RefusalSummary refusal={props.refusal} fields={["email"]} />
          <form method="post" action="/console/operators" class="inline-form">
            <CsrfField token={props.session.csrfToken} />
            <input type="hidden" name="form_key" value={crypto.randomUUID()} />
            <FieldWithReason refusal={props.refusal} name="email" className="grow">
              <label class="grow">
                Email
                <input type="email" name="email" required maxLength={254} value={props.email ?? ""} {...fieldMarks(props.refusal, "email")} />
              </label>
            </FieldWithReason>
            <button type="submit" class="button primary">
              Make invitation link
            </button>
          </form>
        </section>
      </>
    ),
  });
}

/** plural says a count of things: "1 API token", "2 API tokens". */
const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/**
 * removeOperatorPage asks to confirm removing an operator, listing the API tokens still active and
 * the subscriptions they made (or created with one of their tokens), with a box each, unticked, to
 * revoke those tokens and disable the active subscriptions in the same step.
 */
export function removeOperatorPage(props: { session: ConsoleSession; operator: Operator; made: OperatorMade }): string {
  const self = props.operator.id === props.session.operator.id;
  const { tokens, subscriptions } = props.made;
  const active = subscriptions.filter(({ subscription }) => subscription.status !== "disabled").length;
  return confirmPage({
    session: props.session,
    title: "Remove operator",
    section: "operators",
    text: (
      <>
        <p>
          Remove <strong>{props.operator.email}</strong>? {self ? "That is you: you are signed out at once." : "Their sessions end at once and they can no longer sign in."}
        </p>
        <h2>API tokens they made</h2>
        {tokens.length === 0 ? (
          <p class="muted">None still active.</p>
        ) : (
          <ul id="their-tokens">
            {tokens.map((t) => (
              <li>
                <bdi>{bidiBalanced(t.name)}</bdi> (<code>{t.prefix}…</code>), created <Time value={t.created_at} />, last used <Time value={t.last_used_at} />
              </li>
            ))}
          </ul>
        )}
        <h2>Subscriptions they made</h2>
        {subscriptions.length === 0 ? (
          <p class="muted">None, themselves or with one of their API tokens.</p>
        ) : (
          <ul id="their-subscriptions">
            {subscriptions.map(({ subscription: s, via }) => (
              <li>
                <SubscriptionLabel description={s.description} url={s.target_url} /> <StatusBadge status={s.status} />
                {via && (
                  <span class="hint">
                    {" "}
                    created with their API token <bdi>{bidiBalanced(via.name)}</bdi> (<code>{via.prefix}…</code>)
                  </span>
                )}
              </li>
            ))}
          </ul>
        )}
        <p class="muted">What they made stays unless you tick a box below: tokens made from the command line, and subscriptions made by others, are not theirs.</p>
      </>
    ),
    choices: (tokens.length > 0 || active > 0) && (
      <div class="choices">
        {tokens.length > 0 && (
          <label class="check">
            <input type="checkbox" name="revoke_tokens" value="yes" />
            <span>Also revoke their {plural(tokens.length, "API token", "API tokens")}: requests with them get 401 from then on. This cannot be undone.</span>
          </label>
        )}
        {active > 0 && (
          <label class="check">
            <input type="checkbox" name="disable_subscriptions" value="yes" />
            <span>
              Also disable their {plural(active, "active subscription", "active subscriptions")}: nothing more is sent, their pending deliveries end failed; Enable on the Subscriptions page brings one back.
            </span>
          </label>
        )}
      </div>
    ),
    action: `/console/operators/${props.operator.id}/remove`,
    button: `Remove ${props.operator.email}`,
    cancel: "/console/operators",
    formKey: crypto.randomUUID(),
  });
}

/** LinkFields names a pending link in a Withdraw form as pendingLinks listed it; link_ keeps them apart from the invite form's email field on the same page. */
function LinkFields({ link }: { link: Pick<PendingLink, "purpose" | "email" | "created_at"> }) {
  return (
    <>
      <input type="hidden" name="link_purpose" value={link.purpose} />
      <input type="hidden" name="link_email" value={link.email} />
      <input type="hidden" name="link_created_at" value={link.created_at} />
    </>
  );
}

/** withdrawLinkPage asks to confirm withdrawing a pending link, as the row's Withdraw button posted it (a link has no address of its own, and its email stays out of addresses). */
export function withdrawLinkPage(props: { session: ConsoleSession; link: Pick<PendingLink, "purpose" | "email" | "created_at"> }): string {
  const link = props.link;
  return confirmPage({
    session: props.session,
    title: "Withdraw link",
    section: "operators",
    text: (
      <p>
        Withdraw the <strong>{pendingLinkLabel(link)}</strong>? It stops working at once.
      </p>
    ),
    action: "/console/operators/links/withdraw",
    choices: (
      <>
        <LinkFields link={link} />
        <input type="hidden" name="confirm" value="yes" />
      </>
    ),
    button: `Withdraw the ${pendingLinkLabel(link)}`,
    cancel: "/console/operators",
  });
}

/** resetPasswordPage asks to confirm making a password-reset link for an operator. */
export function resetPasswordPage(props: { session: ConsoleSession; operator: Operator }): string {
  return confirmPage({
    session: props.session,
    title: "Reset password",
    section: "operators",
    text: (
      <p>
        Make a one-time link with which <strong>{props.operator.email}</strong> sets a new password? Their current password keeps working until the link is used; then every session of theirs ends.
      </p>
    ),
    formKey: crypto.randomUUID(),
    action: `/console/operators/${props.operator.id}/reset-password`,
    button: "Make reset link",
    cancel: "/console/operators",
  });
}
