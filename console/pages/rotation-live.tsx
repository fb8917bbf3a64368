/** @jsxImportSource preact */
import { useSignal } from "@preact/signals";
import type { ComponentChildren } from "preact";
import { useEffect } from "preact/hooks";
import type { DeliveryWatchView } from "../model.ts";
import { CsrfField, formatDuration, HttpStatus, pageTitle, reasonMarks, receiverUrl, StatusBadge, SubscriptionLabel, Time, WithReason } from "./parts.tsx";

/** WATCH_MS is how often the wizard asks for its test delivery while it is pending. */
const WATCH_MS = 1000;

/** RotationSide is what the wizard shows of the old or the new subscription. */
export interface RotationSide {
  target_url: string;
  description: string | null;
  /** null once the subscription was deleted */
  status: string | null;
}

export interface RotationLiveProps {
  rotationId: string;
  csrfToken: string;
  /** the test form's key, drawn for this showing of the page (the form sent twice sends one ping) */
  testFormKey: string;
  /** pending: deliveries to the old subscription that have not arrived yet */
  old: RotationSide & { pending: number };
  replacement: (RotationSide & { events: string[] }) | null;
  test: DeliveryWatchView | null;
  /** why step 4 was refused (its confirmation box left unticked), shown beside the box; null when it was not */
  confirmReason: string | null;
}

const URL_STEPS = ["Pick", "New subscription", "Test", "Delete old", "Summary"];
const SECRET_STEPS = ["Pick", "New secret", "Test", "Retire old secret", "Summary"];
const URL_TITLES = ["pick a subscription", "new subscription", "test the new subscription", "delete the old subscription", "finished"];
const SECRET_TITLES = ["pick a subscription", "new secret", "test the new secret", "retire the previous secret", "finished"];

/** wizardTitle is the page title of a wizard's step, what it is and its number, so that each step's title is its own. */
export function wizardTitle(step: number, secret = false): string {
  return `${secret ? "Rotate the secret" : "Rotate"}: ${(secret ? SECRET_TITLES : URL_TITLES)[step - 1]} (step ${step} of 5)`;
}

/** useStepTitle keeps the page's title on the step the live island shows (3, then 4 once the test succeeds), as the server titled it at first. */
function useStepTitle(step: number, secret = false) {
  useEffect(() => {
    document.title = pageTitle(wizardTitle(step, secret));
  }, [step]);
}

/**
 * Stepper shows the five steps of the rotation wizard (moving to a new URL, or rotating the secret)
 * and which one is current. A step done has a check mark, and it and a step to come say so in words
 * for screen readers, as the current step does with aria-current: not by their colours alone.
 */
export function Stepper({ current, secret = false }: { current: number; secret?: boolean }) {
  return (
    <ol class="stepper" aria-label="Rotation steps">
      {(secret ? SECRET_STEPS : URL_STEPS).map((label, i) => (
        <li class={i + 1 < current ? "done" : i + 1 === current ? "current" : ""} aria-current={i + 1 === current ? "step" : undefined}>
          <span class="step-no">{i + 1}</span>
          <span class="step-label">{label}</span>
          {i + 1 < current && <span class="step-mark" aria-hidden="true" />}
          {i + 1 !== current && <span class="visually-hidden">{i + 1 < current ? " done" : " to come"}</span>}
        </li>
      ))}
    </ol>
  );
}

/** RotationPair shows the old subscription beside the one replacing it; their headings are the page's second level, drawn as labels. */
export function RotationPair({ old, replacement }: { old: RotationSide; replacement: RotationLiveProps["replacement"] }) {
  return (
    <section class="card rotation-pair">
      <div>
        <h2>Old</h2>
        <SubscriptionLabel description={old.description} url={old.target_url} />
        <p class="hint">{old.status ? <StatusBadge status={old.status} /> : "deleted"}</p>
      </div>
      <div class="arrow" aria-hidden="true">
        →
      </div>
      <div>
        <h2>New</h2>
        {replacement ? (
          <>
            <SubscriptionLabel description={replacement.description} url={replacement.target_url} />
            <p class="hint">
              {replacement.status ? <StatusBadge status={replacement.status} /> : "deleted"} {replacement.events.join(", ")}
            </p>
          </>
        ) : (
          <p class="muted">deleted</p>
        )}
      </div>
    </section>
  );
}

/** useWatchedDelivery follows a test delivery while it is pending, asking the console for it every WATCH_MS. */
function useWatchedDelivery(initial: DeliveryWatchView | null) {
  const test = useSignal(initial);
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const watch = async () => {
      const current = test.value;
      if (!current || current.status !== "pending") return;
      try {
        const res = await fetch(`/console/api/deliveries/${current.id}`, { headers: { accept: "application/json" } });
        if (res.ok) test.value = (await res.json()) as DeliveryWatchView;
      } catch {
        // Offline for a moment: the next round asks again.
      }
      timer = setTimeout(watch, WATCH_MS);
    };
    timer = setTimeout(watch, WATCH_MS);
    return () => clearTimeout(timer);
  }, []);
  return test;
}

/**
 * TestStep is step 3 of both wizards: send a webhook.ping to the subscription under test and show how
 * it went. Sending it comes back to `#step-test`, which a browser then focuses, being focusable
 * (tabindex -1): a screen reader starts at the step and its result, not at the top of the page.
 */
function TestStep({ action, csrfToken, formKey, current, children }: { action: string; csrfToken: string; formKey: string; current: DeliveryWatchView | null; children: ComponentChildren }) {
  return (
    <section class="card step" id="step-test" aria-labelledby="step-test-heading" tabIndex={-1}>
      <h2 id="step-test-heading">
        <span class="step-no">3</span> Send a test event
      </h2>
      <p>{children}</p>
      {current && <TestResult test={current} />}
      <form method="post" action={action}>
        <CsrfField token={csrfToken} />
        <input type="hidden" name="form_key" value={formKey} />
        <button type="submit" class={current ? "button" : "button primary"} id="send-test">
          {current ? "Send another test event" : "Send test event"}
        </button>
      </form>
    </section>
  );
}

/**
 * RotationLive is steps 3 and 4 of the rotation wizard: send a test event to the new subscription,
 * watch its delivery until it succeeds or fails, and only then allow deleting the old subscription.
 */
export function RotationLive({ rotationId, csrfToken, testFormKey, old, replacement, test: initial, confirmReason }: RotationLiveProps) {
  const test = useWatchedDelivery(initial);
  const current = test.value;
  const succeeded = current?.status === "succeeded";
  const base = `/console/rotations/${rotationId}`;
  const oldExists = old.status !== null;
  useStepTitle(succeeded ? 4 : 3);
  return (
    <>
      <Stepper current={succeeded ? 4 : 3} />
      <RotationPair old={old} replacement={replacement} />
      <TestStep action={`${base}/test`} csrfToken={csrfToken} formKey={testFormKey} current={current}>
        A <code>webhook.ping</code> goes to the new subscription only. Check that the new receiver verifies the signature with the new secret and processes
        the event.
      </TestStep>
      <section class={`card step ${succeeded ? "" : "locked"}`} id="step-delete">
        <h2>
          <span class="step-no">4</span> Delete the old subscription
        </h2>
        {!oldExists ? (
          <p>The old subscription no longer exists. Finish to see the summary.</p>
        ) : succeeded ? (
          <>
            <p>The new receiver accepted the test event. Deleting the old subscription stops all deliveries to it.</p>
            {old.pending > 0 && (
              <p class="notice notice-info">
                {old.pending} {old.pending === 1 ? "delivery" : "deliveries"} to the old receiver {old.pending === 1 ? "is" : "are"} still pending; deleting
                now ends {old.pending === 1 ? "it" : "them"} as failed. Events since step 2 also went to the new subscription.
              </p>
            )}
          </>
        ) : (
          <p class="muted" id="delete-locked">
            Available after a successful test delivery to the new subscription. Until then both subscriptions stay active, so no event is lost.
          </p>
        )}
        <form method="post" action={`${base}/delete-old`} class="stack">
          <CsrfField token={csrfToken} />
          {oldExists && (
            <WithReason name="confirm" reason={confirmReason}>
              <label class="check">
                <input type="checkbox" name="confirm" value="yes" required disabled={!succeeded} {...reasonMarks("confirm", confirmReason)} />
                <span>
                  Yes, delete the subscription to <span class="url">{receiverUrl(old.target_url)}</span>
                </span>
              </label>
            </WithReason>
          )}
          <button type="submit" class="button danger" id="delete-old" disabled={!succeeded}>
            {oldExists ? "Delete old subscription" : "Finish"}
          </button>
        </form>
      </section>
    </>
  );
}

export interface SecretRotationLiveProps {
  subscriptionId: string;
  csrfToken: string;
  /** the test form's key, drawn for this showing of the page (the form sent twice sends one ping) */
  testFormKey: string;
  target_url: string;
  description: string | null;
  rotated_at: string;
  /** until when the previous secret signs beside the new one */
  previous_expires_at: string;
  test: DeliveryWatchView | null;
  /** why step 4 was refused (its confirmation box left unticked), shown beside the box; null when it was not */
  confirmReason: string | null;
}

/**
 * SecretRotationLive is steps 3 and 4 of a secret rotation: while both secrets sign, send a test
 * event, watch it succeed, and only then retire the previous secret before its grace period ends.
 */
export function SecretRotationLive({ subscriptionId, csrfToken, testFormKey, target_url, description, rotated_at, previous_expires_at, test: initial, confirmReason }: SecretRotationLiveProps) {
  const test = useWatchedDelivery(initial);
  const current = test.value;
  const succeeded = current?.status === "succeeded";
  const base = `/console/subscriptions/${subscriptionId}/secret-rotation`;
  useStepTitle(succeeded ? 4 : 3, true);
  return (
    <>
      <Stepper current={succeeded ? 4 : 3} secret />
      <section class="card rotation-pair">
        <div>
          <h2>Subscription</h2>
          <SubscriptionLabel description={description} url={target_url} />
          <p class="hint">
            Secret rotated at <Time value={rotated_at} />; until <Time value={previous_expires_at} /> every request but the test event carries two signatures, the new
            secret's first.
          </p>
        </div>
      </section>
      <TestStep action={`${base}/test`} csrfToken={csrfToken} formKey={testFormKey} current={current}>
        A <code>webhook.ping</code> goes to this subscription signed with the new secret alone (other requests carry both signatures until the previous secret
        is retired), so a receiver still on the previous secret refuses it. Configure the receiver with the new secret, then check that it verifies and
        processes the event.
      </TestStep>
      <section class={`card step ${succeeded ? "" : "locked"}`} id="step-retire">
        <h2>
          <span class="step-no">4</span> Retire the previous secret
        </h2>
        {succeeded ? (
          <p>The receiver accepted the test event. From now on only the new secret signs; a receiver still on the previous one will fail to verify.</p>
        ) : (
          <p class="muted" id="retire-locked">
            Available after a successful test delivery. Until then, and until <Time value={previous_expires_at} /> at the latest, both secrets sign.
          </p>
        )}
        <form method="post" action={`${base}/finish`} class="stack">
          <CsrfField token={csrfToken} />
          <WithReason name="confirm" reason={confirmReason}>
            <label class="check">
              <input type="checkbox" name="confirm" value="yes" required disabled={!succeeded} {...reasonMarks("confirm", confirmReason)} />
              <span>Yes, stop signing with the previous secret now</span>
            </label>
          </WithReason>
          <button type="submit" class="button danger" id="retire-previous" disabled={!succeeded}>
            Retire previous secret
          </button>
        </form>
      </section>
    </>
  );
}

function TestResult({ test }: { test: DeliveryWatchView }) {
  const last = test.last_attempt;
  return (
    <div class={`test-result test-${test.status}`} id="test-result" aria-live="polite">
      <p class="test-status">
        <StatusBadge status={test.status} />{" "}
        {test.status === "pending" && !last && <span>Waiting for the receiver…</span>}
        {test.status === "pending" && last && test.next_attempt_at && (
          <span>
            Attempt {test.attempts} did not succeed; next try at <Time value={test.next_attempt_at} />.
          </span>
        )}
        {test.status === "succeeded" && <span>The new receiver accepted the test event.</span>}
        {test.status === "failed" && <span>The new receiver did not accept the test event. Fix the receiver and send another.</span>}
        <span class="muted"> Delivery <code>{test.id}</code></span>
      </p>
      {last && (
        <dl class="facts">
          <dt>Receiver's answer</dt>
          <dd>
            {last.error ? <span class="error-text">{last.error}</span> : <HttpStatus status={last.response_status} />}{" "}
            <span class="muted">
              after {formatDuration(last.duration_ms)}, at <Time value={last.started_at} />
            </span>
          </dd>
          {last.response_body !== null && last.response_body !== "" && (
            <>
              <dt>Response body</dt>
              <dd>
                <pre class="body">{last.response_body}</pre>
              </dd>
            </>
          )}
        </dl>
      )}
    </div>
  );
}
