/** @jsxImportSource preact */
import { MADE_BY_WORDS, type MadeBy, type MakerNames } from "../../server/shared/made-by.ts";
import { bidiBalanced } from "./parts.tsx";

/**
 * MadeByText says who made a token or a subscription: an operator by email ("removed" once they
 * are), the command line, an API token by name and start, or "unknown" for one made before the
 * service recorded it (migration 0047).
 */
export function MadeByText({ madeBy, names }: { madeBy: MadeBy | null; names: MakerNames }) {
  if (madeBy === null) return <span class="muted">{MADE_BY_WORDS.unknown}</span>;
  if (madeBy.kind === "command_line") return <span class="muted">{MADE_BY_WORDS.commandLine}</span>;
  if (madeBy.kind === "operator") {
    return (
      <span>
        {madeBy.email}
        {!names.operators.has(madeBy.id) && <span class="muted"> {MADE_BY_WORDS.removed}</span>}
      </span>
    );
  }
  const token = names.tokens.get(madeBy.id);
  return (
    <span>
      {MADE_BY_WORDS.apiToken}{" "}
      {token ? (
        <>
          <bdi>{bidiBalanced(token.name)}</bdi> (<code>{token.prefix}…</code>)
        </>
      ) : (
        <code>{madeBy.id}</code>
      )}
    </span>
  );
}
