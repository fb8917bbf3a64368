import { useSignal } from "@preact/signals";
import { useEffect } from "preact/hooks";
import type { DeliveryWatchView } from "../model.ts";
import { CsrfField, HttpStatus, StatusBadge, Time } from "./parts.tsx";

/** WATCH_MS is how often the wizard asks for its test delivery while it is pending. */
export const WATCH_MS = 1000;

export interface RotationLiveProps {
  rotationId: string;
  csrfToken: string;
  oldUrl: string;
  oldExists: boolean;
  test: DeliveryWatchView | null;
}

/**
 * RotationLive is steps 3 and 4 of the rotation wizard: send a test event to the new subscription,
 * watch its delivery until it succeeds or fails, and only then allow deleting the old subscription.
 */
export function RotationLive({ rotationId, csrfToken, oldUrl, oldExists, test: initial }: RotationLiveProps) {
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
  return (
    <>
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
          <p>The new receiver answered the test event. Deleting the old subscription stops deliveries to it; events that are already pending for it are still tried.</p>
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
                Yes, delete the subscription to <span class="url">{oldUrl}</span>
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
              after {Math.round(last.duration_ms)} ms, at <Time value={last.started_at} />
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
