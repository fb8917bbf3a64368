/** @jsxImportSource preact */
import type { ComponentChildren } from "preact";
import { WEBHOOK_EVENT_TYPES, type Subscription, type SubscriptionWithSecret } from "../../server/webhooks/model.ts";
import type { ConsoleSession } from "../model.ts";
import type { RecoveryPreview, RotationView, SecretRotationView, SubscriptionChoice, SubscriptionForm, SubscriptionOverview } from "./service.ts";
import { DEFAULT_SECRET_GRACE_HOURS, MAX_RECOVERY_DAYS, MAX_SECRET_GRACE_HOURS } from "../../server/limits/limits.ts";
import { confirmPage, fieldMarks, FieldWithReason, reasonOf, RefusalSummary, SecretOnce, type Refusal } from "../pages/forms.tsx";
import { renderPage } from "../pages/layout.tsx";
import { MakerLink } from "../pages/made-by.tsx";
import type { MakerNames } from "../../server/shared/made-by.ts";
import { parseTimestamp } from "../../server/shared/time.ts";
import { consoleFieldTime } from "../shell.ts";
import { RotationLive, RotationPair, SecretRotationLive, Stepper, wizardTitle, type RotationLiveProps, type SecretRotationLiveProps } from "../pages/rotation-live.tsx";
import { bidiBalanced, CsrfField, DataTable, FailingNote, HeldNote, Island, NoticeBox, PausedNote, receiverUrl, RowSubject, SecretNote, StatusBadge, SubscriptionLabel, tally, Time, type NoticeData } from "../pages/parts.tsx";

/** DEFAULT_EVENTS are ticked on a new subscription form. */
const DEFAULT_EVENTS = ["contact.created", "contact.updated", "contact.deleted"];

/** SUBSCRIPTION_FIELDS are the fields of a subscription form a refusal may name. */
const SUBSCRIPTION_FIELDS = ["target_url", "description", "max_rate", "events"];

/** SubscriptionFields are the target URL, description and event boxes of a subscription form, each with the reason its refusal gives. */
function SubscriptionFields({ values, refusal }: { values: SubscriptionForm; refusal?: Refusal | null }) {
  // The summary links to the first event box; the reason describes every box.
  const events = fieldMarks(refusal, "events");
  return (
    <>
      <FieldWithReason refusal={refusal} name="target_url">
        <label>
          Receiver URL
          <input type="url" name="target_url" required maxLength={2048} placeholder="https://example.com/hooks/crm" value={values.target_url} {...fieldMarks(refusal, "target_url")} />
        </label>
      </FieldWithReason>
      <FieldWithReason refusal={refusal} name="description">
        <label>
          Description <span class="hint">optional</span>
          <input type="text" name="description" maxLength={500} placeholder="What receives these events" value={values.description} {...fieldMarks(refusal, "description")} />
        </label>
      </FieldWithReason>
      <FieldWithReason refusal={refusal} name="max_rate">
        <label>
          Requests per second at most <span class="hint">optional, 1 to 1000: attempts, retries included, are spaced so the receiver never gets more</span>
          <input type="number" name="max_rate" min={1} max={1000} step={1} inputMode="numeric" value={values.max_rate ?? ""} {...fieldMarks(refusal, "max_rate")} />
        </label>
      </FieldWithReason>
      <FieldWithReason refusal={refusal} name="events">
        <fieldset>
          <legend>Events</legend>
          <div class="checks">
            {WEBHOOK_EVENT_TYPES.map((event, i) => (
              <label class="check">
                <input type="checkbox" name="events" value={event} checked={values.events.includes(event)} {...events} id={i === 0 ? events.id : undefined} />
                <code>{event}</code>
              </label>
            ))}
          </div>
        </fieldset>
      </FieldWithReason>
    </>
  );
}

/**
 * actionSubjects names each listed subscription for its row's actions, in words hidden from sight,
 * so that no two rows' actions read alike: its description (else its URL), followed by its URL when
 * another row has the same description, and by its id when another has the same URL too
 * (descriptions and URLs need not differ, and a client may copy another's description).
 */
function actionSubjects(subscriptions: Subscription[]): Map<string, string> {
  const named = (s: Subscription) => s.description ?? receiverUrl(s.target_url);
  const withUrl = (s: Subscription) => (s.description === null ? receiverUrl(s.target_url) : `${s.description} to ${receiverUrl(s.target_url)}`);
  const [names, urls] = [tally(subscriptions, named), tally(subscriptions, withUrl)];
  return new Map(subscriptions.map((s) => [s.id, names.get(named(s)) === 1 ? named(s) : urls.get(withUrl(s)) === 1 ? withUrl(s) : `${withUrl(s)} ${s.id}`]));
}

/** OfSubscription ends a row action's name with its subscription ("Pause subscription Ledger", "Health of subscription Ledger", actionSubjects), for screen readers only: every row has the same actions. */
function OfSubscription({ subject, of = false }: { subject: string; of?: boolean }) {
  return <RowSubject>{`${of ? "of " : ""}subscription ${subject}`}</RowSubject>;
}

function Counts({ counts }: { counts: SubscriptionOverview["counts"] }) {
  return (
    <span class="counts">
      <span class="count-ok">{counts.succeeded} succeeded</span>
      <span class={counts.failed > 0 ? "count-bad" : "count-zero"}>{counts.failed} failed</span>
      {counts.pending > 0 && <span class="count-wait">{counts.pending} pending</span>}
    </span>
  );
}

function rotationStepText(rotation: RotationView): string {
  if (!rotation.test) return "step 3: send a test event";
  if (rotation.test.status === "succeeded") return "step 4: delete the old subscription";
  if (rotation.test.status === "failed") return "step 3: the test event failed";
  return "step 3: waiting for the test event";
}

/** subscriptionsPage renders the subscriptions with recent counts, open rotations and the create form. */
export function subscriptionsPage(props: {
  session: ConsoleSession;
  subscriptions: SubscriptionOverview[];
  rotations: RotationView[];
  names: MakerNames;
  disableAfterHours: number;
  created?: SubscriptionWithSecret | null;
  form?: SubscriptionForm;
  notice?: NoticeData | null;
  refusal?: Refusal | null;
}): string {
  const form = props.form ?? { target_url: "", description: "", events: DEFAULT_EVENTS };
  const subjects = actionSubjects(props.subscriptions.map((overview) => overview.subscription));
  return renderPage({
    title: "Subscriptions",
    session: props.session,
    section: "subscriptions",
    islands: props.created ? ["copy"] : [],
    children: (
      <>
        <div class="page-head row">
          <div>
            <h1>Subscriptions</h1>
            <p class="lead">Receivers of webhook events. To change a receiver's URL or events without losing events, rotate the subscription.</p>
          </div>
          <a class="button primary" href="/console/rotations/new">
            Rotate a subscription
          </a>
        </div>
        <NoticeBox notice={props.notice} />
        {/* The notice above, saying the subscription was created, takes the focus. */}
        {props.created && (
          <SecretOnce id="new-secret" label="Signing secret of the new subscription" heading="Signing secret of the new subscription" focused={false} value={props.created.secret}>
            Receivers verify the <code>webhook-signature</code> header of <span class="url">{receiverUrl(props.created.target_url)}</span> with it.
          </SecretOnce>
        )}
        {props.rotations.map((r) => (
          <div class="notice notice-info rotation-banner">
            <span>
              Rotation in progress from <span class="url">{receiverUrl(r.old.target_url)}</span> to <span class="url">{r.replacement && receiverUrl(r.replacement.target_url)}</span>, at {rotationStepText(r)}.
              Both subscriptions stay active until it is finished.
            </span>
            <a class="button small" href={`/console/rotations/${r.id}`}>
              Resume rotation
            </a>
          </div>
        ))}
        <DataTable id="subscriptions" columns={["Subscription", "Events", "Status", "Deliveries, last 24 hours", "Created (UTC)", "Made by", ""]} empty={props.subscriptions.length === 0 ? "No subscriptions yet. Create one below, or through the API." : null}>
          {props.subscriptions.map(({ subscription: s, counts, rotationId, secretLost, madeBy }) => (
            <tr data-subscription-id={s.id}>
              <td data-label="Subscription">
                <SubscriptionLabel description={s.description} url={s.target_url} />
              </td>
              <td data-label="Events">
                <ul class="events">
                  {s.events.map((e) => (
                    <li>
                      <code>{e}</code>
                    </li>
                  ))}
                </ul>
              </td>
              <td data-label="Status">
                <StatusBadge status={s.status} />
                {s.disabled_reason && <div class="hint">{s.disabled_reason}</div>}
                <FailingNote subscription={s} disableAfterHours={props.disableAfterHours} />
                <HeldNote subscription={s} />
                <PausedNote subscription={s} />
              </td>
              <td data-label="Deliveries, last 24 hours">
                <Counts counts={counts} />
              </td>
              <td data-label="Created">
                <Time value={s.created_at} zone={false} />
              </td>
              <td data-label="Made by">
                <MakerLink madeBy={madeBy} names={props.names} />
              </td>
              <td class="row-actions">
                <a href={`/console/subscriptions/${s.id}`}>Health<OfSubscription subject={subjects.get(s.id)!} of /></a>
                <a href={`/console/?subscription_id=${s.id}`}>Deliveries<OfSubscription subject={subjects.get(s.id)!} of /></a>
                {rotationId ? <a href={`/console/rotations/${rotationId}`}>Resume rotation<OfSubscription subject={subjects.get(s.id)!} of /></a> : <a href={`/console/rotations/new?from=${s.id}`}>Rotate<OfSubscription subject={subjects.get(s.id)!} /></a>}
                <a href={`/console/subscriptions/${s.id}/edit`}>Edit<OfSubscription subject={subjects.get(s.id)!} /></a>
                {s.status !== "disabled" && <a href={`/console/subscriptions/${s.id}/recover`}>Recover failed deliveries<OfSubscription subject={subjects.get(s.id)!} of /></a>}
                {s.status !== "disabled" && (
                  <form method="post" action={`/console/subscriptions/${s.id}/${s.status === "paused" ? "resume" : "pause"}`} class="row-form">
                    <CsrfField token={props.session.csrfToken} />
                    <button type="submit" class="link-button">
                      {s.status === "paused" ? "Resume" : "Pause"}
                      <OfSubscription subject={subjects.get(s.id)!} />
                    </button>
                  </form>
                )}
                {/* Enable is refused until then: it would sign with a secret no receiver knows. */}
                {secretLost && (
                  <a href={`/console/subscriptions/${s.id}/secret-rotation`}>
                    Rotate secret<OfSubscription subject={subjects.get(s.id)!} of />
                  </a>
                )}
                {s.status === "disabled" && !secretLost && (
                  <form method="post" action={`/console/subscriptions/${s.id}/enable`} class="row-form">
                    <CsrfField token={props.session.csrfToken} />
                    <button type="submit" class="link-button">
                      Enable<OfSubscription subject={subjects.get(s.id)!} />
                    </button>
                  </form>
                )}
                <a class="danger-link" href={`/console/subscriptions/${s.id}/delete`}>
                  Delete<OfSubscription subject={subjects.get(s.id)!} />
                </a>
              </td>
            </tr>
          ))}
        </DataTable>
        <section class="card" id="new-subscription">
          <h2>New subscription</h2>
          <RefusalSummary refusal={props.refusal} fields={SUBSCRIPTION_FIELDS} />
          <form method="post" action="/console/subscriptions" class="stack">
            <CsrfField token={props.session.csrfToken} />
            <input type="hidden" name="form_key" value={crypto.randomUUID()} />
            <SubscriptionFields values={form} refusal={props.refusal} />
            <div>
              <button type="submit" class="button primary">
                Create subscription
              </button>
            </div>
          </form>
        </section>
      </>
    ),
  });
}

/** deleteSubscriptionPage asks to confirm deleting a subscription, naming its URL. */
export function deleteSubscriptionPage(props: { session: ConsoleSession; subscription: Subscription; rotationId: string | null }): string {
  const s = props.subscription;
  return confirmPage({
    session: props.session,
    section: "subscriptions",
    title: "Delete subscription?",
    formKey: crypto.randomUUID(),
    text: (
      <>
        <p>
          Delete the subscription to <strong class="url">{receiverUrl(s.target_url)}</strong>
          {s.description && (
            <>
              {" ("}
              <bdi>{bidiBalanced(s.description)}</bdi>)
            </>
          )}
          ? Nothing more is sent to it; its pending deliveries end as failed. Its delivery history stays.
        </p>
        {props.rotationId && (
          <p class="notice notice-info">
            A rotation away from this subscription is under way; finishing it <a href={`/console/rotations/${props.rotationId}`}>in the wizard</a> first tests the new
            receiver.
          </p>
        )}
      </>
    ),
    action: `/console/subscriptions/${s.id}/delete`,
    button: `Delete subscription to ${receiverUrl(s.target_url)}`,
    cancel: "/console/subscriptions",
  });
}

/** RotationHead titles every wizard page; the stepper is left out where the live island draws it. */
function RotationHead({ current }: { current: number | null }) {
  return (
    <div class="page-head">
      <p class="crumbs">
        <a href="/console/subscriptions">Subscriptions</a> / <span>Rotation</span>
      </p>
      <h1>Rotate a subscription</h1>
      <p class="lead">Replace a receiver URL or event set without losing events: create the new subscription, prove it works, then delete the old one.</p>
      {current !== null && <Stepper current={current} />}
    </div>
  );
}

/** rotationStepPage renders step 1 or 2 of the wizard, titled by its step: the steps, then the step's card. */
function rotationStepPage(session: ConsoleSession, step: 1 | 2, heading: string, children: ComponentChildren): string {
  return renderPage({
    title: wizardTitle(step),
    session,
    section: "subscriptions",
    children: (
      <>
        <RotationHead current={step} />
        <section class="card step">
          <h2>
            <span class="step-no">{step}</span> {heading}
          </h2>
          {children}
        </section>
      </>
    ),
  });
}

/** rotationPickPage is step 1: choose the subscription to replace. */
export function rotationPickPage(props: { session: ConsoleSession; subscriptions: SubscriptionChoice[] }): string {
  const subjects = actionSubjects(props.subscriptions.map((choice) => choice.subscription));
  return rotationStepPage(
    props.session,
    1,
    "Which subscription is to be replaced?",
    props.subscriptions.length === 0 ? (
      <p class="muted">
        There are no subscriptions to rotate. <a href="/console/subscriptions#new-subscription">Create one on the Subscriptions page</a>.
      </p>
    ) : (
      <form method="get" action="/console/rotations/new" class="stack">
        <fieldset>
          <legend class="visually-hidden">Subscription to replace</legend>
          <div class="choices">
            {props.subscriptions.map(({ subscription: s, rotationId }, i) => (
              <label class="choice">
                <input type="radio" name="from" value={s.id} required checked={i === 0} />
                <span>
                  <SubscriptionLabel description={s.description} url={s.target_url} />
                  <span class="hint">
                    {s.events.join(", ")} · <StatusBadge status={s.status} />
                    {rotationId && (
                      <>
                        {" "}
                        · rotation under way, continued where it stopped:{" "}
                        <a href={`/console/rotations/${rotationId}`}>
                          Resume rotation<OfSubscription subject={subjects.get(s.id)!} of />
                        </a>
                      </>
                    )}
                  </span>
                  <span class="hint">
                    <SecretNote subscription={s} />
                  </span>
                </span>
              </label>
            ))}
          </div>
        </fieldset>
        <fieldset>
          <legend>What changes?</legend>
          <div class="choices">
            <label class="choice">
              <input type="radio" name="kind" value="url" checked />
              <span>
                Move to a new URL or event set <span class="hint">a new subscription replaces this one once it is tested</span>
              </span>
            </label>
            <label class="choice">
              <input type="radio" name="kind" value="secret" />
              <span>
                Rotate the secret <span class="hint">same subscription, new signing secret; both secrets sign for a grace period</span>
              </span>
            </label>
          </div>
        </fieldset>
        <div>
          <button type="submit" class="button primary">
            Next
          </button>
        </div>
      </form>
    ),
  );
}

/** rotationNewPage is step 2: the new URL and events, prefilled from the old subscription. */
export function rotationNewPage(props: { session: ConsoleSession; old: Subscription; form?: SubscriptionForm; refusal?: Refusal | null }): string {
  const old = props.old;
  const form = props.form ?? { target_url: old.target_url, description: old.description ?? "", events: old.events, max_rate: old.max_rate === null ? "" : String(old.max_rate) };
  return rotationStepPage(
    props.session,
    2,
    "The new subscription",
    <>
      <p>
        Replacing <span class="url">{receiverUrl(old.target_url)}</span>. Enter the new receiver URL and events; they start out as the old subscription's. The old
        subscription stays active until step 4.
      </p>
      <RefusalSummary refusal={props.refusal} fields={SUBSCRIPTION_FIELDS} />
      <form method="post" action="/console/rotations" class="stack">
        <CsrfField token={props.session.csrfToken} />
        <input type="hidden" name="from" value={old.id} />
        <SubscriptionFields values={form} refusal={props.refusal} />
        <div class="actions">
          <button type="submit" class="button primary">
            Create new subscription
          </button>
          <a class="button ghost" href="/console/rotations/new">
            Back
          </a>
        </div>
      </form>
    </>,
  );
}

/** rotationPage shows a rotation where it stands: the new secret right after creation, then test and delete (live), or the summary. */
export function rotationPage(props: { session: ConsoleSession; rotation: RotationView; secret?: string | null; refusal?: Refusal | null }): string {
  const r = props.rotation;
  const live: RotationLiveProps = {
    rotationId: r.id,
    csrfToken: props.session.csrfToken,
    testFormKey: crypto.randomUUID(),
    old: { target_url: r.old.target_url, description: r.old.description || null, status: r.old.subscription?.status ?? null, pending: r.oldPending },
    replacement: r.replacement && { target_url: r.replacement.target_url, description: r.replacement.description, status: r.replacement.status, events: r.replacement.events },
    test: r.test,
    confirmReason: reasonOf(props.refusal, "confirm"),
  };
  return renderPage({
    title: r.step === "done" ? wizardTitle(5) : r.step === "abandoned" ? "Rotate: abandoned" : wizardTitle(r.test?.status === "succeeded" ? 4 : 3),
    session: props.session,
    section: "subscriptions",
    islands: r.step === "test" ? ["rotation", ...(props.secret ? ["copy"] : [])] : [],
    children: (
      <>
        <RotationHead current={r.step === "done" ? 5 : null} />
        <RefusalSummary refusal={props.refusal} fields={["confirm"]} />
        {props.secret && (
          <SecretOnce id="new-secret" label="Signing secret of the new subscription" heading="Step 2 done: the new subscription is created" value={props.secret}>
            Configure the new receiver with it before you send the test event.
          </SecretOnce>
        )}
        {r.step === "test" ? (
          <Island name="rotation" props={live}>
            <RotationLive {...live} />
          </Island>
        ) : (
          <RotationPair old={live.old} replacement={live.replacement} />
        )}
        {r.step === "abandoned" && (
          <section class="card message">
            <p>The new subscription of this rotation was deleted, so the rotation cannot go on. The old subscription is unchanged.</p>
            <a class="button" href={`/console/rotations/new?from=${r.old.id}`}>
              Start again
            </a>
          </section>
        )}
        {r.step === "done" && <RotationSummary rotation={r} />}
      </>
    ),
  });
}

/** SummaryActions ends both wizards' summaries: watch the subscription's deliveries, or go back. */
function SummaryActions({ subscriptionId }: { subscriptionId: string }) {
  return (
    <div class="actions">
      <a class="button primary" href={`/console/?subscription_id=${subscriptionId}`}>
        Watch its deliveries
      </a>
      <a class="button ghost" href="/console/subscriptions">
        Back to subscriptions
      </a>
    </div>
  );
}

/** RotationSummary is the rotation's step 5; it takes the focus as the page loads, being what finishing it answers with. */
function RotationSummary({ rotation: r }: { rotation: RotationView }) {
  return (
    <section class="card step" id="summary" aria-labelledby="summary-heading" tabIndex={-1} autofocus>
      <h2 id="summary-heading">
        <span class="step-no">5</span> Rotation finished
      </h2>
      <dl class="facts grid">
        <dt>Started</dt>
        <dd>
          <Time value={r.created_at} />
        </dd>
        <dt>Finished</dt>
        <dd>
          <Time value={r.completed_at} />
        </dd>
        <dt>Old subscription</dt>
        <dd>
          <span class="url">{receiverUrl(r.old.target_url)}</span> <span class="muted">({r.old.subscription ? "still exists" : "deleted"})</span>
        </dd>
        <dt>New subscription</dt>
        <dd>{r.replacement ? <SubscriptionLabel description={r.replacement.description} url={r.replacement.target_url} /> : <span class="muted">deleted since</span>}</dd>
        <dt>Test event</dt>
        <dd>
          {r.test ? (
            <>
              <StatusBadge status={r.test.status} /> <a href={`/console/deliveries/${r.test.id}`}>{r.test.id}</a>
            </>
          ) : (
            <span class="muted">no longer kept</span>
          )}
        </dd>
      </dl>
      <p>Events now go only to the new receiver.</p>
      <SummaryActions subscriptionId={r.id} />
    </section>
  );
}

/** secretRotationPage shows a secret rotation: step 2 (choose the grace period and rotate), then test and retire (live), or the summary once retired. */
export function secretRotationPage(props: { session: ConsoleSession; view: SecretRotationView; secret?: string | null; finished?: boolean; refusal?: Refusal | null }): string {
  const { subscription: s, step, test } = props.view;
  const live: SecretRotationLiveProps = {
    subscriptionId: s.id,
    csrfToken: props.session.csrfToken,
    testFormKey: crypto.randomUUID(),
    target_url: s.target_url,
    description: s.description,
    rotated_at: s.secret_rotated_at ?? "",
    previous_expires_at: s.previous_secret_expires_at ?? "",
    test,
    confirmReason: reasonOf(props.refusal, "confirm"),
  };
  return renderPage({
    title: wizardTitle(props.finished ? 5 : step === "rotate" ? 2 : test?.status === "succeeded" ? 4 : 3, true),
    session: props.session,
    section: "subscriptions",
    islands: step === "test" ? ["secret-rotation", ...(props.secret ? ["copy"] : [])] : [],
    children: (
      <>
        <div class="page-head">
          <p class="crumbs">
            <a href="/console/subscriptions">Subscriptions</a> / <span>Secret rotation</span>
          </p>
          <h1>Rotate the signing secret</h1>
          <p class="lead">
            A new secret for <span class="url">{receiverUrl(s.target_url)}</span> without a gap: both secrets sign every request until the receiver is proven to use the new one.
          </p>
          {step === "rotate" && <Stepper current={props.finished ? 5 : 2} secret />}
        </div>
        <RefusalSummary refusal={props.refusal} fields={["grace_hours", "confirm"]} />
        {props.secret && (
          <SecretOnce id="new-secret" label="New signing secret" heading="Step 2 done: the secret is rotated" value={props.secret}>
            Configure the receiver with it, then send the test event.
          </SecretOnce>
        )}
        {step === "test" ? (
          <Island name="secret-rotation" props={live}>
            <SecretRotationLive {...live} />
          </Island>
        ) : props.finished ? (
          // What retiring the previous secret answers with takes the focus, unless the new secret shown once does (no grace period).
          <section class="card step" id="summary" aria-labelledby="summary-heading" tabIndex={props.secret ? undefined : -1} autofocus={!props.secret}>
            <h2 id="summary-heading">
              <span class="step-no">5</span> Secret rotation finished
            </h2>
            <dl class="facts grid">
              <dt>Rotated</dt>
              <dd>
                <Time value={s.secret_rotated_at} />
              </dd>
              <dt>Previous secret retired</dt>
              <dd>
                <Time value={s.previous_secret_expires_at} />
              </dd>
            </dl>
            <p>Requests now carry one signature, made with the new secret.</p>
            <SummaryActions subscriptionId={s.id} />
          </section>
        ) : (
          <section class="card step">
            <h2>
              <span class="step-no">2</span> New secret
            </h2>
            <p>
              The subscription gets a new secret, shown once. For the grace period every request carries two signatures, <code>v1,&lt;new&gt; v1,&lt;previous&gt;</code>,
              so a receiver that has the current secret keeps verifying while it switches; the test event of step 3 carries the new one's alone.
            </p>
            <p class="muted">
              <SecretNote subscription={s} />
            </p>
            {s.secret_rotated_at !== null && s.failing_since !== null && s.failing_since >= s.secret_rotated_at && (
              // No grace runs on this step: the previous secret is gone, and a receiver failing since the rotation likely never had the secret it made.
              <p class="rotation-warning">
                Every attempt has failed since the secret was rotated at <Time value={s.secret_rotated_at} />, and the previous one is no longer accepted: a receiver still on the secret before that rotation verifies neither signature of this one (the new secret's and the current one's), and goes on refusing until it is given the new secret.
              </p>
            )}
            <form method="post" action={`/console/subscriptions/${s.id}/rotate-secret`} class="stack">
              <CsrfField token={props.session.csrfToken} />
              <input type="hidden" name="secret_tag" value={props.view.secretTag} />
              <input type="hidden" name="form_key" value={crypto.randomUUID()} />
              <FieldWithReason refusal={props.refusal} name="grace_hours">
                <label>
                  Grace period, hours <span class="hint">0 to {MAX_SECRET_GRACE_HOURS}</span>
                  <input type="number" name="grace_hours" min={0} max={MAX_SECRET_GRACE_HOURS} step={1} required value={String(DEFAULT_SECRET_GRACE_HOURS)} {...fieldMarks(props.refusal, "grace_hours")} />
                </label>
              </FieldWithReason>
              <div class="actions">
                <button type="submit" class="button primary">
                  Rotate secret
                </button>
                <a class="button ghost" href={`/console/rotations/new?from=${s.id}`}>
                  Back
                </a>
              </div>
            </form>
          </section>
        )}
      </>
    ),
  });
}

/**
 * datetimeLocal shows an RFC 3339 time in a datetime-local field, in UTC as the field is labelled
 * (an offset a link carried is applied), to the minute (`up` rounds up, so a window's end keeps its
 * last events); text that is no time, as a refused form sent it, or a year the field cannot hold, stays as it is.
 */
function datetimeLocal(iso: string, up = false): string {
  const at = parseTimestamp(iso);
  const shown = at === null ? null : consoleFieldTime(up ? Math.ceil(at / 60_000) * 60_000 : at);
  return (shown ?? iso).slice(0, 16);
}

/** recoverPage asks for a recovery window, then shows how many failed deliveries it holds before the operator confirms. */
export function recoverPage(props: { session: ConsoleSession; subscription: Subscription; window: { since: string; until: string }; preview: RecoveryPreview | null; refusal?: Refusal | null }): string {
  const s = props.subscription;
  const preview = props.preview;
  return renderPage({
    title: "Recover failed deliveries",
    session: props.session,
    section: "subscriptions",
    children: (
      <>
        <div class="page-head">
          <p class="crumbs">
            <a href="/console/subscriptions">Subscriptions</a> / <span>Recover</span>
          </p>
          <h1>Recover failed deliveries</h1>
          <p class="lead">
            After an outage of <span class="url">{receiverUrl(s.target_url)}</span>: send every delivery of a window that ended as failed once more, with its original
            <code>webhook-id</code>, oldest first.
          </p>
        </div>
        <section class="card">
          <h2>Window</h2>
          <RefusalSummary refusal={props.refusal} fields={["since", "until"]} />
          <form method="get" action={`/console/subscriptions/${s.id}/recover`} class="stack" id="recover-window">
            <FieldWithReason refusal={props.refusal} name="since">
              <label>
                From (UTC) <span class="hint">at most {MAX_RECOVERY_DAYS} days ago</span>
                <input type="datetime-local" name="since" required value={datetimeLocal(props.window.since)} {...fieldMarks(props.refusal, "since")} />
              </label>
            </FieldWithReason>
            <FieldWithReason refusal={props.refusal} name="until">
              <label>
                Until (UTC)
                <input type="datetime-local" name="until" required value={datetimeLocal(props.window.until, true)} {...fieldMarks(props.refusal, "until")} />
              </label>
            </FieldWithReason>
            <div>
              <button type="submit" class="button">
                Count failed deliveries
              </button>
            </div>
          </form>
        </section>
        {preview && (
          <section class="card" id="recover-confirm">
            <h2>Confirm</h2>
            <p id="recover-count">
              {preview.count === 0 ? "No" : preview.count} failed {preview.count === 1 ? "delivery" : "deliveries"} from <Time value={preview.since} /> until{" "}
              <Time value={preview.until} />.
            </p>
            {s.status === "paused" && <p class="notice notice-info">The subscription is paused: recovered deliveries wait until it is resumed.</p>}
            <form method="post" action={`/console/subscriptions/${s.id}/recover`} class="actions">
              <CsrfField token={props.session.csrfToken} />
              <input type="hidden" name="form_key" value={crypto.randomUUID()} />
              <input type="hidden" name="since" value={preview.since} />
              <input type="hidden" name="until" value={preview.until} />
              <button type="submit" class="button primary" id="recover-send" disabled={preview.count === 0}>
                Send {preview.count} {preview.count === 1 ? "delivery" : "deliveries"} again
              </button>
              <a class="button ghost" href="/console/subscriptions">
                Cancel
              </a>
            </form>
          </section>
        )}
      </>
    ),
  });
}

/** editSubscriptionPage edits a subscription's description; its URL and events change through the rotation wizard. */
export function editSubscriptionPage(props: { session: ConsoleSession; subscription: Subscription; description?: string; refusal?: Refusal | null }): string {
  const s = props.subscription;
  return renderPage({
    title: "Edit subscription",
    session: props.session,
    section: "subscriptions",
    children: (
      <>
        <div class="page-head">
          <p class="crumbs">
            <a href="/console/subscriptions">Subscriptions</a> / <span>Edit</span>
          </p>
          <h1>Edit subscription</h1>
          <p class="lead">
            <span class="url">{receiverUrl(s.target_url)}</span>. The URL and events do not change in place: <a href={`/console/rotations/new?from=${s.id}`}>rotate the subscription</a>{" "}
            instead, so no event is lost.
          </p>
        </div>
        <section class="card">
          <RefusalSummary refusal={props.refusal} fields={["description"]} />
          <form method="post" action={`/console/subscriptions/${s.id}/edit`} class="stack">
            <CsrfField token={props.session.csrfToken} />
            <FieldWithReason refusal={props.refusal} name="description">
              <label>
                Description <span class="hint">optional</span>
                <input type="text" name="description" maxLength={500} value={props.description ?? s.description ?? ""} {...fieldMarks(props.refusal, "description")} />
              </label>
            </FieldWithReason>
            <div class="actions">
              <button type="submit" class="button primary">
                Save
              </button>
              <a class="button ghost" href="/console/subscriptions">
                Cancel
              </a>
            </div>
          </form>
        </section>
      </>
    ),
  });
}
