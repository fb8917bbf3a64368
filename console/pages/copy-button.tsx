/** @jsxImportSource preact */
import { useSignal } from "@preact/signals";

/**
 * CopyButton copies the value of the input with the given id and says how that went in a status
 * region beside it, there (empty) from the start so that a screen reader reads what it is given;
 * the button keeps its name, since a focused button's new name is not read out.
 */
export function CopyButton({ targetId }: { targetId: string }) {
  const copied = useSignal<"idle" | "copied" | "failed">("idle");
  const copy = async () => {
    const input = document.getElementById(targetId) as HTMLInputElement | null;
    if (!input) return;
    try {
      await navigator.clipboard.writeText(input.value);
      copied.value = "copied";
    } catch {
      // The clipboard API needs a secure context; plain http elsewhere than localhost falls back to a selection.
      input.select();
      copied.value = document.execCommand("copy") ? "copied" : "failed";
    }
  };
  return (
    <>
      <button type="button" class="button small" onClick={copy}>
        Copy
      </button>
      <span role="status" class="copy-status">
        {copied.value === "copied" ? "Copied to the clipboard." : copied.value === "failed" ? "Not copied: select the text and copy it by hand." : ""}
      </span>
    </>
  );
}
