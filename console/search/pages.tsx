/** @jsxImportSource preact */
import type { ConsoleSession } from "../model.ts";
import { renderPage } from "../pages/layout.tsx";
import { NoticeBox } from "../pages/parts.tsx";

/** SearchBox is the one search field: an id of a delivery, event, contact or subscription, an email, or a name. */
export function SearchBox({ value = "" }: { value?: string }) {
  return (
    <form class="search" method="get" action="/console/search" role="search">
      <label for="search-q" class="visually-hidden">
        Find a delivery, event, contact or subscription
      </label>
      <input id="search-q" type="search" name="q" value={value} placeholder="dlv_…, evt_…, con_…, email or name" maxLength={300} spellcheck={false} />
      <button type="submit" class="button">
        Find
      </button>
    </form>
  );
}

/** searchPage says that a search found nothing, with the box to try again. */
export function searchPage(props: { session: ConsoleSession; q: string; nothing: string }): string {
  return renderPage({
    title: "Search",
    session: props.session,
    children: (
      <>
        <div class="page-head">
          <h1>Search</h1>
          <SearchBox value={props.q} />
        </div>
        <NoticeBox notice={{ kind: "info", text: props.nothing }} />
      </>
    ),
  });
}
