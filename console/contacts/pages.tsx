/** @jsxImportSource preact */
import type { ErasableResource } from "../../server/tombstones/service.ts";
import type { Delivery } from "../../server/webhooks/model.ts";
import type { Contact } from "../../server/contacts/model.ts";
import type { WebhookEvent } from "../../server/webhooks/service.ts";
import type { ConsoleSession, SubscriptionNames } from "../model.ts";
import { confirmPage } from "../pages/forms.tsx";
import { renderPage } from "../pages/layout.tsx";
import { bidiBalanced, contactName, CsrfField, DataTable, HttpStatus, isolated, NoticeBox, receiverUrl, RowSubject, shownFullName, StatusBadge, SubscriptionLabel, tally, Time, type NoticeData } from "../pages/parts.tsx";
import type { AccountPageView, ContactPageView, ContactsView } from "./service.ts";

/**
 * linkSubjects names each listed contact for its link, in words hidden from sight, so that no two
 * links of the list read alike: its email, or its id when it has none or another row shows the
 * same name and email (contacts' emails are not unique).
 */
function linkSubjects(contacts: ContactsView["contacts"]): Map<string, string> {
  const shownAs = (c: ContactsView["contacts"][number]) => JSON.stringify([shownFullName(c), c.email]);
  const rows = tally(contacts, shownAs);
  return new Map(contacts.map((c) => [c.id, c.email !== null && rows.get(shownAs(c)) === 1 ? c.email : c.id]));
}

/** ContactsTable lists a page of contacts (the contacts page's, a search's) under the sentence counting them. */
export function ContactsTable({ view }: { view: ContactsView }) {
  const subjects = linkSubjects(view.contacts);
  const owner = view.user ? ` whose assigned user (assigned_user_id) is ${isolated(view.user.name)}` : "";
  const count =
    view.total === 0
      ? view.q
        ? `No contact${owner} matches “${bidiBalanced(view.q)}”.`
        : view.user
          ? `No contact${owner}.`
          : "No contacts yet."
      : `${view.older ? `Showing ${view.contacts.length} older of` : view.total > view.contacts.length ? `Showing the newest ${view.contacts.length} of` : "Showing all"} ${view.total}${view.by === "email" ? ` with the email ${bidiBalanced(view.q)}` : view.by === "name" ? ` whose name contains “${bidiBalanced(view.q)}”` : ""}${view.by !== "all" && owner ? " and" : ""}${owner}.`;
  return (
    <DataTable
      id="contacts"
      columns={["Name", "Email", "Tags", "Created (UTC)"]}
      empty={view.contacts.length === 0 ? (view.q ? "Try part of a name, or a whole email address." : "Contacts are created through the API, or imported with crm import.") : null}
      head={
        <div class="card-head">
          <p class="count" id="contacts-count">
            {count}
          </p>
        </div>
      }
    >
      {view.contacts.map((c) => (
        <tr data-contact-id={c.id}>
          <td data-label="Name">
            <a href={`/console/contacts/${c.id}`}>
              {shownFullName(c) ? <span class="chosen">{shownFullName(c)}</span> : <span class="muted">(no name)</span>}
              <RowSubject>contact {subjects.get(c.id)}</RowSubject>
            </a>
          </td>
          <td data-label="Email">{c.email ? <span class="chosen">{bidiBalanced(c.email)}</span> : <span class="muted">–</span>}</td>
          <td data-label="Tags">
            {c.tags.length ? (
              <span class="chosen">
                <span>
                  {c.tags.map((tag) => (
                    <span class="tag">{bidiBalanced(tag)}</span>
                  ))}
                </span>
              </span>
            ) : (
              <span class="muted">–</span>
            )}
          </td>
          <td data-label="Created">
            <Time value={c.created_at} zone={false} />
          </td>
        </tr>
      ))}
    </DataTable>
  );
}

/** ContactsPages are the addresses of a list's other pages: its newest, and the older ones after it. */
export interface ContactsPages {
  newest?: string | undefined;
  older?: string | undefined;
}

/** ContactsPager links a list of contacts to its newest page and its older ones (`pages`: the contacts page's, a search's). */
export function ContactsPager({ pages }: { pages: ContactsPages }) {
  if (!pages.newest && !pages.older) return null;
  return (
    <nav class="pager" aria-label="Contacts pages">
      {pages.newest && (
        <a class="button ghost" href={pages.newest}>
          ← Newest
        </a>
      )}
      {pages.older && (
        <a class="button ghost" href={pages.older} rel="next" id="older-contacts">
          Older contacts →
        </a>
      )}
    </nav>
  );
}

/**
 * contactsPage renders the contacts: a search by name or email, newest first, paged (`pages`). The
 * filter posts what was typed, and the browser keeps no list of it (autocomplete off): a token
 * pasted there by mistake would be in the page's address (contactRoutes), or in that list.
 */
export function contactsPage(props: { session: ConsoleSession; view: ContactsView; pages: ContactsPages; notice?: NoticeData | null }): string {
  const { view } = props;
  return renderPage({
    title: "Contacts",
    session: props.session,
    section: "contacts",
    children: (
      <>
        <div class="page-head">
          <h1>Contacts</h1>
          <p class="lead">Contacts change through the API. Open one to see every event sent about it, or to delete it for an erasure request.</p>
        </div>
        <form class="filters card" method="post" action="/console/contacts" role="search">
          <CsrfField token={props.session.csrfToken} />
          <label class="grow">
            Name or email
            <input type="search" name="q" value={view.q} placeholder="Ada Lovelace or ada@example.com" maxLength={254} spellcheck={false} autocomplete="off" />
          </label>
          {view.user && <input type="hidden" name="assigned_user_id" value={view.user.id} />}
          <div class="filter-actions">
            <button type="submit" class="button">
              Search
            </button>
            {(view.q || view.older || view.user) && (
              <a class="button ghost" href="/console/contacts">
                Clear
              </a>
            )}
          </div>
        </form>
        <NoticeBox notice={props.notice} />
        <ContactsTable view={view} />
        <ContactsPager pages={props.pages} />
      </>
    ),
  });
}

/** EventDeliveries lists deliveries of an event: the subscription each went to (linking its page while it exists) and how it ended. */
export function EventDeliveries({ id, deliveries, subscriptions }: { id: string; deliveries: Delivery[]; subscriptions: SubscriptionNames }) {
  return (
    <DataTable id={id} columns={["Delivery", "Subscription", "Status", { label: "Attempts", className: "num" }, "Response"]} empty={deliveries.length === 0 ? "No subscription wanted this event: nothing was sent." : null}>
      {deliveries.map((d) => (
        <tr data-delivery-id={d.id}>
          <td data-label="Delivery">
            <a href={`/console/deliveries/${d.id}`}>
              <code>{d.id}</code>
            </a>
          </td>
          <td data-label="Subscription">
            {subscriptions.has(d.subscription_id) ? (
              <a href={`/console/subscriptions/${d.subscription_id}`}>
                <SubscriptionLabel description={subscriptions.get(d.subscription_id)!} url={d.target_url} />
              </a>
            ) : (
              <>
                <span class="url">{receiverUrl(d.target_url)}</span> <span class="muted">(subscription deleted)</span>
              </>
            )}
          </td>
          <td data-label="Status">
            <StatusBadge status={d.status} />
          </td>
          <td data-label="Attempts" class="num">
            {d.attempts}
          </td>
          <td data-label="Response">
            <HttpStatus status={d.last_response_status} />
            {d.last_error && <span class="error-text"> {d.last_error}</span>}
          </td>
        </tr>
      ))}
    </DataTable>
  );
}

function ContactEvent({ event, subscriptions }: { event: WebhookEvent; subscriptions: SubscriptionNames }) {
  return (
    <article class="contact-event" data-event-id={event.id}>
      <header>
        <a href={`/console/events/${event.id}`}>
          <code>{event.type}</code>
          <RowSubject>event {event.id}</RowSubject>
        </a>
        <Time value={event.created_at} />
        <span class="muted">
          {event.deliveries.length} {event.deliveries.length === 1 ? "delivery" : "deliveries"}
        </span>
        {event.payload_erased_at && <span class="tag">payload erased</span>}
      </header>
      <EventDeliveries id={`deliveries-${event.id}`} deliveries={event.deliveries} subscriptions={subscriptions} />
    </article>
  );
}

/** RecordEvents lists the latest events about a contact or account, each with its deliveries. */
function RecordEvents({ resource, events, eventLimit, subscriptions }: { resource: ErasableResource; events: WebhookEvent[]; eventLimit: number; subscriptions: SubscriptionNames }) {
  return (
    <section class="card" id={`${resource}-events`}>
      <h2>What we sent about this {resource}</h2>
      <p class="muted">
        {events.length === 0
          ? `No event about this ${resource} yet.`
          : events.length === eventLimit
            ? `The latest ${eventLimit} events, newest first, each with its deliveries.`
            : `Every event, newest first, each with its deliveries.`}
      </p>
      {events.map((event) => (
        <ContactEvent event={event} subscriptions={subscriptions} />
      ))}
    </section>
  );
}

/** RecordHead is the head of a contact's or account's page: the way back to the contacts, its name, and the notice of what was just done. */
function RecordHead({ id, name, notice }: { id: string; name: string; notice: NoticeData | null | undefined }) {
  return (
    <>
      <div class="page-head">
        <p class="crumbs">
          <a href="/console/contacts">Contacts</a> / <span>{id}</span>
        </p>
        <h1>{name}</h1>
      </div>
      <NoticeBox notice={notice} />
    </>
  );
}

/**
 * Deleted says a contact or account was deleted, and offers, for an erasure request, to erase what
 * its earlier events hold of it (eraseRecordPage asks first).
 */
function Deleted({ resource, id }: { resource: ErasableResource; id: string }) {
  return (
    <>
      <NoticeBox notice={{ kind: "info", text: `This ${resource} was deleted. What was sent about it is listed below.` }} />
      <p class="actions erase-action">
        <a class="button danger" href={`/console/${resource}s/${id}/erase`}>
          Erase its events…
        </a>
        <span class="hint">For an erasure request: what its earlier events hold of it is erased, as the API's erasure does.</span>
      </p>
    </>
  );
}

/** contactPage renders a contact's fields, accounts and assigned users, and every event sent about it with the deliveries of each; a live one's page offers to delete it (deleteContactPage asks first), a deleted one's to erase its events. */
export function contactPage(props: { session: ConsoleSession; view: ContactPageView; eventLimit: number; notice?: NoticeData | null }): string {
  const { record: contact, events, id } = props.view;
  const name = contact ? contactName(contact) : id;
  return renderPage({
    // A title cannot hold <bdi>: FSI ... PDI keep an override in the name off " · CRM console".
    title: isolated(name),
    session: props.session,
    section: "contacts",
    children: (
      <>
        <RecordHead id={id} name={name} notice={props.notice} />
        {contact ? (
          <section class="card" id="contact-fields">
            <dl class="facts grid">
              <dt>Contact id</dt>
              <dd>
                <code>{contact.id}</code>
              </dd>
              <dt>Email</dt>
              <dd>{contact.email ?? <span class="muted">–</span>}</dd>
              <dt>Phone</dt>
              <dd>{contact.phone ?? <span class="muted">–</span>}</dd>
              <dt>External id</dt>
              <dd>{contact.external_id ? <code>{contact.external_id}</code> : <span class="muted">–</span>}</dd>
              <dt>Tags</dt>
              <dd>{contact.tags.length ? contact.tags.map((tag) => <span class="tag">{bidiBalanced(tag)}</span>) : <span class="muted">–</span>}</dd>
              <dt>Accounts</dt>
              <dd id="contact-accounts">
                {contact.accounts?.length ? contact.accounts.map((a) => <span class="tag">{bidiBalanced(a.name)}</span>) : <span class="muted">none</span>}
              </dd>
              <dt>Assigned user (assigned_user_id)</dt>
              <dd id="contact-user">
                {contact.assigned_user ? (
                  <span class="tag">
                    <bdi>{bidiBalanced(contact.assigned_user.name)}</bdi> &lt;{bidiBalanced(contact.assigned_user.email)}&gt;
                  </span>
                ) : (
                  <span class="muted">none</span>
                )}
              </dd>
              <dt>Assigned users (assigned_user_ids)</dt>
              <dd id="contact-users">
                {contact.assigned_users?.length ? (
                  contact.assigned_users.map((u) => (
                    <span class="tag">
                      <bdi>{bidiBalanced(u.name)}</bdi> &lt;{bidiBalanced(u.email)}&gt;
                    </span>
                  ))
                ) : (
                  <span class="muted">none</span>
                )}
              </dd>
              <dt>Version</dt>
              <dd>{contact.version}</dd>
              <dt>Created</dt>
              <dd>
                <Time value={contact.created_at} />
              </dd>
              <dt>Updated</dt>
              <dd>
                <Time value={contact.updated_at} />
              </dd>
            </dl>
            {Object.keys(contact.custom_fields).length > 0 && (
              <>
                <h2>Custom fields</h2>
                <pre class="code">{JSON.stringify(contact.custom_fields, null, 2)}</pre>
              </>
            )}
            <p class="actions delete-action">
              <a class="button danger" href={`/console/contacts/${contact.id}/delete`}>
                Delete…
              </a>
              <span class="hint">For an erasure request: deleted as the API's delete does (contact.deleted is sent), its page then offers to erase its events.</span>
            </p>
          </section>
        ) : (
          <Deleted resource="contact" id={id} />
        )}
        <RecordEvents resource="contact" events={events} eventLimit={props.eventLimit} subscriptions={props.view.subscriptions} />
      </>
    ),
  });
}

/** accountPage renders an account's name and domain, and every event sent about it with the deliveries of each; a deleted one's page offers to erase them. */
export function accountPage(props: { session: ConsoleSession; view: AccountPageView; eventLimit: number; notice?: NoticeData | null }): string {
  const { record: account, events, id } = props.view;
  const name = account ? account.name : id;
  return renderPage({
    title: isolated(name),
    session: props.session,
    section: "contacts",
    children: (
      <>
        <RecordHead id={id} name={bidiBalanced(name)} notice={props.notice} />
        {account ? (
          <section class="card" id="account-fields">
            <dl class="facts grid">
              <dt>Account id</dt>
              <dd>
                <code>{account.id}</code>
              </dd>
              <dt>Domain</dt>
              <dd>{account.domain ? bidiBalanced(account.domain) : <span class="muted">–</span>}</dd>
              <dt>Version</dt>
              <dd>{account.version}</dd>
            </dl>
          </section>
        ) : (
          <Deleted resource="account" id={id} />
        )}
        <RecordEvents resource="account" events={events} eventLimit={props.eventLimit} subscriptions={props.view.subscriptions} />
      </>
    ),
  });
}

/** eraseRecordPage asks to confirm erasing what a deleted contact's or account's earlier events hold of it (the API's POST .../deleted/:id/erase). */
export function eraseRecordPage(props: { session: ConsoleSession; resource: ErasableResource; id: string }): string {
  const { resource, id } = props;
  return confirmPage({
    session: props.session,
    section: "contacts",
    title: `Erase the deleted ${resource}'s events?`,
    formKey: crypto.randomUUID(),
    text: (
      <p>
        For an erasure request: the <code>{resource}.created</code> and <code>{resource}.updated</code> events of the deleted {resource} <code>{id}</code> then hold only their ids, their
        deliveries still pending end failed unsent (a paused subscription's too), and their attempts keep neither what the receivers answered nor the headers sent. Its{" "}
        <code>{resource}.deleted</code> event stays. This cannot be undone.
      </p>
    ),
    action: `/console/${resource}s/${id}/erase`,
    button: `Erase the events of ${id}`,
    cancel: `/console/${resource}s/${id}`,
  });
}

/** deleteContactPage asks to confirm deleting a live contact (the API's DELETE /contacts/:id): what goes, what its subscribers are sent, and the Erase that follows for an erasure request. */
export function deleteContactPage(props: { session: ConsoleSession; contact: Contact }): string {
  const { contact } = props;
  const name = shownFullName(contact);
  return confirmPage({
    session: props.session,
    section: "contacts",
    title: "Delete the contact?",
    formKey: crypto.randomUUID(),
    text: (
      <p>
        Delete the contact {name && <bdi>{name}</bdi>}
        {name && " "}({contact.email && `${bidiBalanced(contact.email)}, `}
        <code>{contact.id}</code>)? Its subscribers are sent <code>contact.deleted</code>. For an erasure request, then erase what its earlier events hold of it: its page offers that once it
        is deleted. This cannot be undone.
      </p>
    ),
    action: `/console/contacts/${contact.id}/delete`,
    button: `Delete ${contact.id}`,
    cancel: `/console/contacts/${contact.id}`,
  });
}
