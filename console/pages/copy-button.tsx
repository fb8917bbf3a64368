/** @jsxImportSource preact */
import { useSignal } from "@preact/signals";

/** CopyButton copies the value of the input with the given id and says so. */
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
    <button type="button" class="button small" onClick={copy}>
      {copied.value === "copied" ? "Copied ✓" : copied.value === "failed" ? "Select and copy by hand" : "Copy"}
    </button>
  );
}
