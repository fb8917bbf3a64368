/** @jsxImportSource preact */
import type { MadeBy } from "../../server/shared/made-by.ts";
import { bidiBalanced } from "./parts.tsx";

/** MakerNames is what names a token's or a subscription's maker: the operators there are now (one not among them was removed) and each API token's name and start. */
export interface MakerNames {
  operators: ReadonlySet<string>;
  tokens: ReadonlyMap<string, { name: string; prefix: string }>;
}

/**
 * MadeByText says who made a token or a subscription: an operator by email ("removed" once they
 * are), the command line, an API token by name and start, or "unknown" for one made before the
 * service recorded it (migration 0047).
 */
export function MadeByText({ madeBy, names }: { madeBy: MadeBy | null; names: MakerNames }) {
  if (madeBy === null) return <span class="muted">unknown</span>;
  if (madeBy.kind === "command_line") return <span class="muted">command line</span>;
  if (madeBy.kind === "operator") {
    return (
      <span>
        {madeBy.email}
        {!names.operators.has(madeBy.id) && <span class="muted"> (removed)</span>}
      </span>
    );
  }
  const token = names.tokens.get(madeBy.id);
  return (
    <span>
      API token{" "}
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
