/** @jsxImportSource preact */
import { render } from "preact";
import { CopyButton } from "../pages/copy-button.tsx";

// Copy buttons only work with JavaScript, so the server renders none; this adds one to each secret.
for (const slot of document.querySelectorAll<HTMLElement>("[data-copy-for]")) {
  render(<CopyButton targetId={slot.dataset.copyFor!} />, slot);
}
