/** @jsxImportSource preact */
import type { ComponentChildren } from "preact";
import { renderToString } from "preact-render-to-string";
import type { ConsoleSession } from "../model.ts";
import { CsrfField, pageTitle } from "./parts.tsx";

export type Section = "deliveries" | "subscriptions" | "contacts" | "tokens" | "users" | "operators";

const NAV: { section: Section; href: string; label: string }[] = [
  { section: "deliveries", href: "/console/", label: "Deliveries" },
  { section: "subscriptions", href: "/console/subscriptions", label: "Subscriptions" },
  { section: "contacts", href: "/console/contacts", label: "Contacts" },
  { section: "tokens", href: "/console/tokens", label: "API tokens" },
  { section: "users", href: "/console/users", label: "Users" },
  { section: "operators", href: "/console/operators", label: "Operators" },
];

export interface LayoutProps {
  title: string;
  /** null on the sign-in and setup pages: no navigation */
  session: ConsoleSession | null;
  section?: Section;
  /** names of the island bundles the page loads */
  islands?: string[];
  children: ComponentChildren;
}

function Layout({ title, session, section, islands = [], children }: LayoutProps) {
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>{pageTitle(title)}</title>
        <link rel="icon" href="data:," />
        <link rel="stylesheet" href="/console/assets/console.css" />
        {islands.map((name) => (
          <script type="module" src={`/console/assets/${name}.js`} />
        ))}
      </head>
      <body class={session ? "signed-in" : "signed-out"}>
        <a class="skip-link" href="#main">
          Skip to main content
        </a>
        <header class="topbar">
          <div class="topbar-inner">
            <a class="brand" href="/console/">
              <span class="brand-mark" aria-hidden="true">◆</span> CRM console
            </a>
            {session && (
              <>
                <nav aria-label="Console">
                  <ul>
                    {NAV.map((item) => (
                      <li>
                        <a href={item.href} aria-current={item.section === section ? "page" : undefined}>
                          {item.label}
                        </a>
                      </li>
                    ))}
                  </ul>
                </nav>
                <form class="signout" method="post" action="/console/logout">
                  <CsrfField token={session.csrfToken} />
                  <span class="who" title="Signed in as">
                    {session.operator.email}
                  </span>
                  <button type="submit" class="button small ghost">
                    Sign out
                  </button>
                </form>
              </>
            )}
          </div>
        </header>
        <main class={session ? "page" : "page narrow"} id="main" tabIndex={-1}>
          {children}
        </main>
      </body>
    </html>
  );
}

/** renderPage renders a whole console page to HTML (without the doctype, which htmlResponse adds). */
export function renderPage(props: LayoutProps): string {
  return renderToString(<Layout {...props} />);
}
