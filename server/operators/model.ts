import { t } from "elysia";
import { IN_ASCII_FORM, MAX_EMAIL_LENGTH, MAX_OPERATOR_PASSWORD_LENGTH, MIN_OPERATOR_PASSWORD_LENGTH } from "../limits/limits.ts";
import { EMAIL_FORMAT, emailError } from "../shared/domains.ts";

const email = t.String({ format: EMAIL_FORMAT, maxLength: MAX_EMAIL_LENGTH, error: emailError(`must be an email address of at most ${MAX_EMAIL_LENGTH} characters, its domain ${IN_ASCII_FORM}`) });
const password = t.String({
  minLength: MIN_OPERATOR_PASSWORD_LENGTH,
  maxLength: MAX_OPERATOR_PASSWORD_LENGTH,
  error: `must be ${MIN_OPERATOR_PASSWORD_LENGTH} to ${MAX_OPERATOR_PASSWORD_LENGTH} characters`,
});

/** OperatorInput is who may sign in to the console: an email and a password (`operator create`, the setup and invitation forms). */
export const OperatorInput = t.Object({ email, password });
export type OperatorInput = typeof OperatorInput.static;

/** OperatorEmail is an invitation's one field. */
export const OperatorEmail = t.Object({ email });

/** NewPassword is a password typed twice, as the setup, invitation and reset forms take it. */
export const NewPassword = t.Object({ password, password_again: t.String({ maxLength: MAX_OPERATOR_PASSWORD_LENGTH }) });
export type NewPassword = typeof NewPassword.static;

/** Operator is a person who signs in to the console. */
export interface Operator {
  id: string;
  email: string;
}

/** OperatorSummary is an operator as the operators page and `operator list` show them. */
export interface OperatorSummary extends Operator {
  created_at: string;
  /** when the operator last used the console; null when never or when every session ended */
  last_seen_at: string | null;
}

/** OperatorLink is what a one-time link grants: becoming an operator (invite) or setting a new password (reset). */
export interface OperatorLink {
  purpose: "invite" | "reset";
  email: string;
  /** whether an operator has the email: always for a reset; for an invitation, one made since (`operator create`), so it cannot be accepted */
  operator_exists: boolean;
}

/** PendingLink is a one-time link not used yet, as the operators page lists it to withdraw. */
export interface PendingLink {
  purpose: "invite" | "reset";
  email: string;
  /** the email of the operator who made it; null when made from the command line */
  created_by: string | null;
  created_at: string;
  expires_at: string;
}
