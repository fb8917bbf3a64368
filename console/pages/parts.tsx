/** @jsxImportSource preact */
import type { ComponentChildren } from "preact";

// Shared by server-rendered pages and browser islands: nothing here may import server code.

const STATUS_WORDS: Record<string, string> = {
  succeeded: "Succeeded",
  failed: "Failed",
  pending: "Pending",
  active: "Active",
  paused: "Paused",
  disabled: "Disabled",
  revoked: "Revoked",
};

/** pageTitle is a page's title as the browser shows it: the page's own, then the console's name. */
export const pageTitle = (title: string) => `${title} · CRM console`;

/** StatusBadge shows a status as a coloured word, so it reads without colour too. */
export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge badge-${status in STATUS_WORDS ? status : "other"}`}>{STATUS_WORDS[status] ?? status}</span>;
}

/**
 * FailingNote says, of an active subscription every attempt to which has failed, since when and
 * when it is disabled if that goes on (README, Endpoint health): its badge still says Active.
 * disableAfterHours 0 never disables. A streak already past the limit (the setting lowered since
 * it began) is disabled at its next failed attempt, which is when the limit is checked: its time
 * would be one already gone.
 */
export function FailingNote({ subscription, disableAfterHours }: { subscription: { status: string; failing_since: string | null }; disableAfterHours: number }) {
  if (subscription.status !== "active" || subscription.failing_since === null) return null;
  const disablesAt = new Date(Date.parse(subscription.failing_since) + disableAfterHours * 3_600_000);
  // An instant past 9999 (or past what a Date holds) has no RFC 3339 date to show: the hours are said instead.
  const when =
    disablesAt.getUTCFullYear() <= 9999 ? (
      <>
        at <Time value={disablesAt.toISOString()} />
      </>
    ) : (
      `${disableAfterHours} h after that`
    );
  const disabled =
    disableAfterHours === 0 ? (
      "not disabled automatically (--disable-failing-after-hours is 0)."
    ) : disablesAt.getTime() <= Date.now() ? (
      `disabled automatically at its next attempt if that fails too (it has failed for longer than the ${disableAfterHours} h limit).`
    ) : (
      <>disabled automatically {when} if every attempt goes on failing.</>
    );
  return (
    <p class="failing-note">
      Failing since <Time value={subscription.failing_since} />; {disabled}
    </p>
  );
}

/**
 * HeldNote says, of a subscription its receiver holds (held_until: a 429 or 503 with Retry-After),
 * until when nothing but a test ping is sent to it: its badge still says Active.
 */
export function HeldNote({ subscription }: { subscription: { status: string; held_until: string | null } }) {
  if (subscription.status !== "active" || subscription.held_until === null) return null;
  return (
    <p class="held-note">
      Held by its receiver until <Time value={subscription.held_until} /> (it answered 429 or 503 with Retry-After): nothing is sent to it before then but a test ping, and its pending deliveries spend no attempt meanwhile.
    </p>
  );
}

/**
 * PausedNote says since when a subscription is paused, as FailingNote and HeldNote say theirs: a
 * colleague finding it paused the next morning asks whether the pause is still meant.
 */
export function PausedNote({ subscription }: { subscription: { status: string; paused_at: string | null } }) {
  if (subscription.status !== "paused" || subscription.paused_at === null) return null;
  return (
    <p class="paused-note">
      Paused since <Time value={subscription.paused_at} />: nothing is sent to it, its deliveries are kept and go out on Resume.
    </p>
  );
}

/**
 * SecretNote says when a subscription's secret was last rotated, through the API or the console,
 * and whether the previous one still signs: after "everything fails" it is the first thing to
 * ask. A previous secret that expired with the rotation had no grace period.
 */
export function SecretNote({ subscription: s }: { subscription: { secret_rotated_at: string | null; previous_secret_expires_at: string | null } }) {
  if (s.secret_rotated_at === null) return null;
  const retired = s.previous_secret_expires_at;
  return (
    <span class="secret-note">
      Secret rotated at <Time value={s.secret_rotated_at} />
      {retired === null || Date.parse(retired) <= Date.parse(s.secret_rotated_at) ? (
        ", the previous one retired at once."
      ) : Date.parse(retired) > Date.now() ? (
        <>
          ; the previous one still signs too until <Time value={retired} />.
        </>
      ) : (
        <>
          ; the previous one retired at <Time value={retired} />.
        </>
      )}
    </span>
  );
}

/**
 * holdPuttingOff returns the end of its receiver's hold on a pending delivery's active subscription
 * when that is later than the delivery's own next attempt, which it then puts off; else null. Both
 * are RFC 3339 in UTC: they compare as text.
 */
export function holdPuttingOff(delivery: { status: string; next_attempt_at: string | null }, subscription: { status: string; held_until: string | null } | null): string | null {
  const hold = subscription?.status === "active" && delivery.status === "pending" ? subscription.held_until : null;
  return hold !== null && (delivery.next_attempt_at === null || hold > delivery.next_attempt_at) ? hold : null;
}

/** WaitsForHold takes the place of a pending delivery's next retry, when sooner, while its receiver holds its subscription (HeldNote). */
export function WaitsForHold({ until }: { until: string }) {
  return (
    <span class="waits">
      waits for its receiver until <Time value={until} /> (Retry-After)
    </span>
  );
}

/** WaitsForResume takes the place of a pending delivery's next retry while its subscription is paused: it is sent on Resume, not at that time. */
export function WaitsForResume({ since }: { since: string | null }) {
  return (
    <span class="waits">
      waits for Resume (paused since <Time value={since} />)
    </span>
  );
}

/** formatTime shows an RFC 3339 timestamp as `2026-11-21 10:00:03` (UTC); a year of more than four digits (`+010009-`) is shown whole. */
function formatTime(iso: string): string {
  const t = iso.indexOf("T");
  return `${iso.slice(0, t)} ${iso.slice(t + 1, t + 9)}`;
}

/**
 * Time renders a timestamp in UTC, saying so ("2026-11-21 10:00:03 UTC": an operator elsewhere
 * would read a bare time as local), with the exact value as a tooltip. `zone={false}` leaves the
 * zone to a table column whose heading says "(UTC)".
 */
export function Time({ value, zone = true }: { value: string | null; zone?: boolean }) {
  if (value === null) return <span class="muted">–</span>;
  return (
    <time dateTime={value} title={`${value} (UTC)`}>
      {formatTime(value)}
      {zone && " UTC"}
    </time>
  );
}

/** relativeTime says how far `iso` is from `now`: "in 4 s", "3 min ago". */
export function relativeTime(iso: string, now: string): string {
  const seconds = Math.round((Date.parse(iso) - Date.parse(now)) / 1000);
  const size = Math.abs(seconds);
  const amount = size < 60 ? `${size} s` : size < 3600 ? `${Math.round(size / 60)} min` : size < 86400 ? `${Math.round(size / 3600)} h` : `${Math.round(size / 86400)} d`;
  if (size < 1) return "now";
  return seconds > 0 ? `in ${amount}` : `${amount} ago`;
}

/** formatDuration shows an attempt's duration in whole milliseconds ("<1 ms" below one). */
export function formatDuration(ms: number): string {
  return ms < 1 ? "<1 ms" : `${Math.round(ms)} ms`;
}

/** HttpStatus shows a response code with a class telling success from failure. */
export function HttpStatus({ status }: { status: number | null }) {
  if (status === null) return <span class="muted">none</span>;
  return <code class={status >= 200 && status < 300 ? "http-ok" : "http-bad"}>{status}</code>;
}

/** CsrfField is the hidden CSRF token every form posts. */
export function CsrfField({ token }: { token: string }) {
  return <input type="hidden" name="_csrf" value={token} />;
}

/** Notice is a message box above a form or table. */
export interface NoticeData {
  kind: "error" | "success" | "info";
  text: string;
}

/**
 * NoticeBox renders a notice with a role screen readers announce. What an action did (success) or
 * why it did not (error) takes the focus as the page loads (autofocus: the console's CSP runs no
 * inline script), as a refused form's summary does: a live region present at load is not
 * announced, and the keyboard would start again at the top of the page, far from the row acted on.
 */
export function NoticeBox({ notice }: { notice?: NoticeData | null }) {
  if (!notice) return null;
  const outcome = notice.kind !== "info";
  return (
    <div class={`notice notice-${notice.kind}`} role={notice.kind === "error" ? "alert" : "status"} tabIndex={outcome ? -1 : undefined} autofocus={outcome}>
      {notice.text}
    </div>
  );
}

/** The closer of each bidi embedding or override (LRE, RLE, LRO, RLO: PDF) and isolate (LRI, RLI, FSI: PDI). */
const BIDI_CLOSER: Record<string, string> = { "\u202A": "\u202C", "\u202B": "\u202C", "\u202D": "\u202C", "\u202E": "\u202C", "\u2066": "\u2069", "\u2067": "\u2069", "\u2068": "\u2069" };

/**
 * bidiBalanced is client text with its bidi controls balanced, for wherever the console shows it
 * inside an isolate of its own (isolated, <bdi>, CSS `unicode-bidi: isolate`): a PDI of the client's
 * would close the console's isolate early, the console's own PDI then match nothing, and an override
 * the client opened run on over the console's words to the end of the paragraph. So a PDF or PDI
 * that closes nothing the text opened is dropped, and what the text leaves open is closed at its end.
 */
export function bidiBalanced(text: string): string {
  if (!/[\u202A-\u202E\u2066-\u2069]/.test(text)) return text;
  const open: string[] = []; // the closers still owed, innermost last
  let balanced = "";
  for (const char of text) {
    if (BIDI_CLOSER[char]) open.push(BIDI_CLOSER[char]);
    // A PDF closes only an embedding opened inside the innermost isolate (UAX #9 X7); a PDI closes
    // its isolate and the embeddings opened inside it (X6a).
    else if (char === "\u202C") {
      if (open.at(-1) !== "\u202C") continue;
      open.pop();
    } else if (char === "\u2069") {
      if (!open.includes("\u2069")) continue;
      open.length = open.lastIndexOf("\u2069");
    }
    balanced += char;
  }
  return balanced + open.reverse().join("");
}

/**
 * isolated wraps text a client chose (a description, a URL, a searched email), bidiBalanced, in
 * Unicode's first-strong isolate and pop directional isolate, for where markup cannot go (an
 * option's label, a notice's text, a page's title): a right-to-left override in it then reorders
 * only itself, not the words after it, as CSS isolates `.sub-description` and `.url` elsewhere.
 */
export function isolated(text: string): string {
  return `\u2068${bidiBalanced(text)}\u2069`;
}

/**
 * disabledBecause is a disabled subscription's reason in parentheses, for the console's notices that
 * say it is disabled, as the API's refusals give it; nothing when it has none (enabled meanwhile).
 */
export function disabledBecause(reason: string | null | undefined): string {
  return reason ? ` (${reason})` : "";
}

/**
 * receiverUrl is a receiver's URL as the console shows it: a host written in other letters than
 * ASCII is shown in the ASCII (punycode) form deliveries go to, as browsers show a name mixing
 * scripts, so that `https://һooks.partner.example/crm` (a Cyrillic һ) does not read as the genuine
 * `https://hooks.partner.example/crm`; the rest of the URL stays as written, bidiBalanced.
 */
export function receiverUrl(url: string): string {
  const written = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)(.*)$/is.exec(url);
  if (!written || /^[\x00-\x7f]*$/.test(written[2]!) || !URL.canParse(url)) return bidiBalanced(url);
  const userinfo = written[2]!.slice(0, written[2]!.lastIndexOf("@") + 1);
  return bidiBalanced(`${written[1]}${userinfo}${new URL(url).host}${written[3]}`);
}

/** SubscriptionLabel shows a subscription's description above its URL (receiverUrl); a span, so it may stand in a heading, link or label. */
export function SubscriptionLabel({ description, url }: { description: string | null; url: string }) {
  return (
    <span class="sub-label">
      {description ? <span class="sub-description">{bidiBalanced(description)}</span> : <span class="muted">(no description)</span>}
      <span class="url">{receiverUrl(url)}</span>
    </span>
  );
}

/** tally counts the items by `key`, for naming rows apart when what they show repeats. */
export function tally<T>(items: T[], key: (item: T) => string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1);
  return counts;
}

/** RowSubject ends the name of a row's action with what the row is, for screen readers only, so that "Revoke" in a list of every row's actions says which; it is read after the visible words, as voice control expects. */
export function RowSubject({ children }: { children: ComponentChildren }) {
  return <span class="visually-hidden"> {children}</span>;
}

/** fieldId is the id of a field with a reason, which a refusal summary links to. */
export const fieldId = (name: string) => `field-${name}`;
const reasonId = (name: string) => `${name}-reason`;

/** reasonMarks are the attributes of a field with a reason (a refused form's, in the API's words): its id (fieldId), aria-invalid, and aria-describedby naming the reason (WithReason); none when `reason` is null. */
export function reasonMarks(name: string, reason: string | null): { id?: string; "aria-invalid"?: "true"; "aria-describedby"?: string } {
  return reason === null ? {} : { id: fieldId(name), "aria-invalid": "true", "aria-describedby": reasonId(name) };
}

/**
 * WithReason is a field (a label wrapping its input, or a fieldset) and, when it has a reason, the
 * reason beside it; the reason stays outside the label, so it describes the input (reasonMarks)
 * without becoming part of its name. `className` is the field's own layout class.
 */
export function WithReason({ name, reason, className, children }: { name: string; reason: string | null; className?: string; children: ComponentChildren }) {
  if (reason === null) return <>{children}</>;
  return (
    <div class={className ? `field ${className}` : "field"}>
      {children}
      <p class="field-reason" id={reasonId(name)}>
        {reason}
      </p>
    </div>
  );
}

/** Column heads a DataTable column; "" is an actions column, named for screen readers only. */
export type Column = string | { label: string; className: string };

/** DataTable is a card holding a table (rows stack as cards on phones), or a sentence when it has no rows. */
export function DataTable(props: { id: string; columns: Column[]; empty: string | null; head?: ComponentChildren; foot?: ComponentChildren; children: ComponentChildren }) {
  const { id, columns, empty, children } = props;
  return (
    <section class="card flush">
      {props.head}
      {empty !== null ? (
        <p class="empty">{empty}</p>
      ) : (
        <div class="table-wrap">
          <table class="data responsive" id={id}>
            <thead>
              <tr>
                {columns.map((column) =>
                  typeof column !== "string" ? (
                    <th scope="col" class={column.className}>
                      {column.label}
                    </th>
                  ) : column === "" ? (
                    <th scope="col">
                      <span class="visually-hidden">Actions</span>
                    </th>
                  ) : (
                    <th scope="col">{column}</th>
                  ),
                )}
              </tr>
            </thead>
            <tbody>{children}</tbody>
          </table>
        </div>
      )}
      {props.foot}
    </section>
  );
}

/** Island wraps a component the browser brings to life; its props travel as a JSON data block (CSP allows it: it is not a script). */
export function Island({ name, props, children }: { name: string; props: unknown; children?: ComponentChildren }) {
  const id = `island-${name}-props`;
  // JSON in HTML: escape what could end the block or start markup.
  const json = JSON.stringify(props).replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
  return (
    <>
      <script type="application/json" id={id} dangerouslySetInnerHTML={{ __html: json }} />
      <div data-island={name} data-props={id}>
        {children}
      </div>
    </>
  );
}

/** shownFullName is a contact's full name as the console shows it, or null when it has nothing to see (empty, or spaces alone). */
export function shownFullName(contact: { full_name: string | null }): string | null {
  return contact.full_name && contact.full_name.trim() !== "" ? bidiBalanced(contact.full_name) : null;
}

/** contactName is how a contact is named on the console: its full name when it has one to see, else its email, else its id. */
export function contactName(contact: { full_name: string | null; email: string | null; id: string }): string {
  return shownFullName(contact) ?? bidiBalanced(contact.email || contact.id);
}
