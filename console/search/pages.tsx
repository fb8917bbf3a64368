/** @jsxImportSource preact */
import type { ComponentChildren } from "preact";
import { ContactsPager, ContactsTable, type ContactsPages } from "../contacts/pages.tsx";
import type { ContactsView } from "../contacts/service.ts";
import type { DeletedContact } from "../../server/contacts/service.ts";
import type { SecretShape } from "../addresses.ts";
import type { ConsoleSession } from "../model.ts";
import { expiredNotice, secretNotice } from "../pages/forms.tsx";
import { renderPage } from "../pages/layout.tsx";
import { bidiBalanced, CsrfField, DataTable, NoticeBox, Time } from "../pages/parts.tsx";
import { SEARCH_MAX_LENGTH } from "./service.ts";

/**
 * SearchBox is the one search field: an id of a delivery, event, contact or subscription, an email,
 * or a name. It posts (searchRoutes), and the browser keeps no list of what was typed in it
 * (autocomplete off): either would keep a token pasted by mistake.
 */
export function SearchBox({ session, value = "" }: { session: ConsoleSession; value?: string }) {
  return (
    <form class="search" method="post" action="/console/search" role="search">
      <CsrfField token={session.csrfToken} />
      <label for="search-q" class="visually-hidden">
        Find a delivery, event, contact or subscription
      </label>
      <input id="search-q" type="search" name="q" value={value} placeholder="dlv_…, evt_…, con_…, email or name" maxLength={SEARCH_MAX_LENGTH} spellcheck={false} autocomplete="off" />
      <button type="submit" class="button">
        Find
      </button>
    </form>
  );
}

/** searchAnswer is the search's own page, titled `title`: the box (holding `value`) and what the search says. */
function searchAnswer(session: ConsoleSession, title: string, value: string, children: ComponentChildren): string {
  return renderPage({
    title,
    session,
    children: (
      <>
        <div class="page-head">
          <h1>Search</h1>
          <SearchBox session={session} value={value} />
        </div>
        {children}
      </>
    ),
  });
}

/** searchPage says that a search found nothing, with the box to try again; that answer to the search takes the focus (NoticeBox), as the page loads. */
export function searchPage(props: { session: ConsoleSession; q: string; nothing: string }): string {
  return searchAnswer(props.session, "No match · Search", props.q, <NoticeBox notice={{ kind: "error", text: props.nothing }} />);
}

/**
 * DeletedContacts lists the deleted contacts an email found, each marked deleted and linking its
 * page, which lists what was sent about it and offers Erase.
 */
function DeletedContacts({ q, deleted }: { q: string; deleted: DeletedContact[] }) {
  const count = deleted.length === 1 ? "1 deleted contact" : `${deleted.length} deleted contacts`;
  return (
    <DataTable
      id="deleted-contacts"
      columns={["Contact", "Deleted (UTC)"]}
      empty={null}
      head={
        <div class="card-head">
          <p class="count" id="deleted-contacts-count">
            {count} had the email {bidiBalanced(q)}: open one to see what was sent about it, or to erase its events.
          </p>
        </div>
      }
    >
      {deleted.map((c) => (
        <tr data-contact-id={c.id}>
          <td data-label="Contact">
            <a href={`/console/contacts/${c.id}`}>
              <code>{c.id}</code> <span class="tag">deleted</span>
            </a>
          </td>
          <td data-label="Deleted"><Time value={c.deleted_at} zone={false} /></td>
        </tr>
      ))}
    </DataTable>
  );
}

/**
 * searchResultsPage lists the contacts a search matched, and the deleted ones an email found
 * (`deleted`), with the box holding what was typed. The other pages are links to the search's
 * sealed addresses (`pages`: the newest, the older ones), which hold none of the text.
 */
export function searchResultsPage(props: { session: ConsoleSession; q: string; view: ContactsView; deleted: DeletedContact[]; pages: ContactsPages }): string {
  const { session, q, view, deleted, pages } = props;
  return searchAnswer(
    session,
    "Search",
    q,
    <>
      {(view.total > 0 || deleted.length === 0) && <ContactsTable view={view} />}
      <ContactsPager pages={pages} />
      {deleted.length > 0 && <DeletedContacts q={q} deleted={deleted} />}
    </>,
  );
}

/** expiredSearchPage says that a search's address no longer opens (an hour after the search, or in another session), with the empty box to search again. */
export function expiredSearchPage(props: { session: ConsoleSession }): string {
  return searchAnswer(
    props.session,
    "Search expired · Search",
    "",
    <NoticeBox notice={expiredNotice("search")} />,
  );
}

/** secretPage says that what was typed looks like a token or a signing secret and was not searched (secretNotice); the box is empty. */
export function secretPage(props: { session: ConsoleSession; secret: SecretShape; inAddress: boolean }): string {
  return searchAnswer(props.session, "Search", "", <NoticeBox notice={secretNotice(props.secret, props.inAddress)} />);
}
