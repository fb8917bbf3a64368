/** @jsxImportSource preact */
import { useSignal } from "@preact/signals";

/**
 * CopyButton copies the value of the input with the given id and says how that went in a status
 * region beside it, there (empty) from the start so that a screen reader reads what it is given;
 * the button keeps its name, since a focused button's new name is not read out. Each press says it
 * in an element of its own (keyed by the press): a second press setting the text the first set
 * would change nothing in the region, and a screen reader would hear nothing (WCAG 4.1.3).
 */
export function CopyButton({ targetId }: { targetId: string }) {
  const said = useSignal<{ outcome: "idle" | "copied" | "failed"; press: number }>({ outcome: "idle", press: 0 });
  const copy = async () => {
    const input = document.getElementById(targetId) as HTMLInputElement | null;
    if (!input) return;
    let copied: boolean;
    try {
      await navigator.clipboard.writeText(input.value);
      copied = true;
    } catch {
      // The clipboard API needs a secure context; plain http elsewhere than localhost falls back to a selection.
      input.select();
      copied = document.execCommand("copy");
    }
    said.value = { outcome: copied ? "copied" : "failed", press: said.value.press + 1 };
  };
  const { outcome, press } = said.value;
  return (
    <>
      <button type="button" class="button small" onClick={copy}>
        Copy
      </button>
      <span role="status" class="copy-status">
        <span key={press}>{outcome === "copied" ? "Copied to the clipboard." : outcome === "failed" ? "Not copied: select the text and copy it by hand." : ""}</span>
      </span>
    </>
  );
}
