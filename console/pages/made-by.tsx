/** @jsxImportSource preact */
import { commandLineText, MADE_BY_WORDS, operatorWords, type ChangeMaker, type MakerNames } from "../../server/shared/made-by.ts";
import { bidiBalanced } from "./parts.tsx";

/**
 * MadeByText says who made a token, a subscription or a change: an operator by email ("removed"
 * once they are, "an operator (removed, forgotten)" once forgotten: operatorWords), the command
 * line (with its command, for a change recorded since migration 0052), an API token by name and
 * start, the delivery loop, or "unknown" for one made before the service recorded it (migrations
 * 0047, 0052).
 */
function MadeByText({ madeBy, names }: { madeBy: ChangeMaker | null; names: MakerNames }) {
  if (madeBy === null) return <span class="muted">{MADE_BY_WORDS.unknown}</span>;
  if (madeBy.kind === "command_line") return <span class="muted">{commandLineText(madeBy)}</span>;
  if (madeBy.kind === "delivery_loop") return <span class="muted">{MADE_BY_WORDS.deliveryLoop}</span>;
  if (madeBy.kind === "operator") {
    const { name, note } = operatorWords(madeBy, names);
    return (
      <span>
        {name}
        {note !== null && <span class="muted"> {note}</span>}
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

/**
 * MakerLink is MadeByText linking the maker's row: an API token's on the Tokens page, its id beside
 * it (a revoked one's row stays), an operator's on the Operators page while they are one; "who did
 * this?" goes on from there.
 */
export function MakerLink({ madeBy, names }: { madeBy: ChangeMaker | null; names: MakerNames }) {
  if (madeBy?.kind === "api_token") {
    return (
      <>
        <a href={`/console/tokens#${madeBy.id}`}>
          <MadeByText madeBy={madeBy} names={names} />
        </a>{" "}
        <span class="muted">
          (<code>{madeBy.id}</code>)
        </span>
      </>
    );
  }
  if (madeBy?.kind === "operator" && names.operators.has(madeBy.id)) {
    return (
      <a href={`/console/operators#${madeBy.id}`}>
        <MadeByText madeBy={madeBy} names={names} />
      </a>
    );
  }
  return <MadeByText madeBy={madeBy} names={names} />;
}
