/** @jsxImportSource preact */
import { useSignal } from "@preact/signals";
import { useEffect } from "preact/hooks";
import type { DeliveryWatchView } from "../model.ts";
import { CsrfField, formatDuration, HttpStatus, StatusBadge, SubscriptionLabel, Time } from "./parts.tsx";

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
  /** pending: deliveries to the old subscription that have not arrived yet */
  old: RotationSide & { pending: number };
  replacement: (RotationSide & { events: string[] }) | null;
  test: DeliveryWatchView | null;
}

const STEPS = ["Pick", "New subscription", "Test", "Delete old", "Summary"];

/** Stepper shows the five steps of the rotation wizard and which one is current. */
export function Stepper({ current }: { current: number }) {
  return (
    <ol class="stepper" aria-label="Rotation steps">
      {STEPS.map((label, i) => (
        <li class={i + 1 < current ? "done" : i + 1 === current ? "current" : ""} aria-current={i + 1 === current ? "step" : undefined}>
          <span class="step-no">{i + 1}</span>
          <span class="step-label">{label}</span>
        </li>
      ))}
    </ol>
  );
}

/** RotationPair shows the old subscription beside the one replacing it. */
export function RotationPair({ old, replacement }: { old: RotationSide; replacement: RotationLiveProps["replacement"] }) {
  return (
    <section class="card rotation-pair">
      <div>
        <h3>Old</h3>
        <SubscriptionLabel description={old.description} url={old.target_url} />
        <p class="hint">{old.status ? <StatusBadge status={old.status} /> : "deleted"}</p>
      </div>
      <div class="arrow" aria-hidden="true">
        →
      </div>
      <div>
        <h3>New</h3>
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

/**
 * RotationLive is steps 3 and 4 of the rotation wizard: send a test event to the new subscription,
 * watch its delivery until it succeeds or fails, and only then allow deleting the old subscription.
 */
export function RotationLive({ rotationId, csrfToken, old, replacement, test: initial }: RotationLiveProps) {
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
  const current = test.value;
  const succeeded = current?.status === "succeeded";
  const base = `/console/rotations/${rotationId}`;
  const oldExists = old.status !== null;
  return (
    <>
      <Stepper current={succeeded ? 4 : 3} />
      <RotationPair old={old} replacement={replacement} />
      <section class="card step" id="step-test">
        <h2>
          <span class="step-no">3</span> Send a test event
        </h2>
        <p>
          A <code>webhook.ping</code> goes to the new subscription only. Check that the new receiver verifies the signature with the new secret and
          processes the event.
        </p>
        {current && <TestResult test={current} />}
        <form method="post" action={`${base}/test`}>
          <CsrfField token={csrfToken} />
          <button type="submit" class={current ? "button" : "button primary"} id="send-test">
            {current ? "Send another test event" : "Send test event"}
          </button>
        </form>
      </section>
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
            <label class="check">
              <input type="checkbox" name="confirm" value="yes" required disabled={!succeeded} />
              <span>
                Yes, delete the subscription to <span class="url">{old.target_url}</span>
              </span>
            </label>
          )}
          <button type="submit" class="button danger" id="delete-old" disabled={!succeeded}>
            {oldExists ? "Delete old subscription" : "Finish"}
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
