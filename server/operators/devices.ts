import { randomSecret, sameBytes, sha256 } from "../shared/crypto.ts";
import type { SecretBox } from "../webhooks/secrets.ts";
import type { DeviceRow } from "./store.ts";

/**
 * DEVICE_TTL_MS is how long a device cookie is trusted: 30 days from the sign-in that gave it.
 * Every sign-in gives a new one, so it only has to outlast the longest gap between an operator's
 * sign-ins (a holiday); a browser left behind stops being trusted a month later.
 */
export const DEVICE_TTL_MS = 30 * 24 * 60 * 60 * 1000;
/**
 * DEVICE_FAILURES is how many wrong passwords a device cookie is trusted for: its sign-ins skip the
 * address's pacing, so a stolen cookie gets these guesses and no more before the address's rules
 * hold it too. A success replaces the cookie and starts a new budget.
 */
export const DEVICE_FAILURES = 5;
/** DEVICES_PER_OPERATOR is how many browsers an operator keeps trusted; an older one gives way to a newer. */
export const DEVICES_PER_OPERATOR = 20;
/** SIGNING_PURPOSE names the key device cookies are signed with, derived from the secrets key. */
const SIGNING_PURPOSE = "console device cookie";

/** DeviceCookie is what a device cookie whose signature holds names: an operator and the row of its nonce. */
export interface DeviceCookie {
  operatorId: string;
  idHash: Uint8Array;
}

function signatureOf(secrets: SecretBox, payload: string): string {
  return Buffer.from(secrets.signature(SIGNING_PURPOSE, payload)).toString("base64url");
}

/**
 * newDeviceCookie makes a device cookie for an operator: `operator id.nonce.expiry.signature`
 * (HMAC-SHA256 of the rest), and the row to store, which holds the nonce's SHA-256 only.
 */
export function newDeviceCookie(secrets: SecretBox, operatorId: string, now: number): { value: string; row: DeviceRow } {
  const nonce = randomSecret();
  const expiresAt = now + DEVICE_TTL_MS;
  const payload = `${operatorId}.${nonce}.${expiresAt}`;
  return {
    value: `${payload}.${signatureOf(secrets, payload)}`,
    row: { id_hash: sha256(nonce), operator_id: operatorId, failures: 0, created_at: now, expires_at: expiresAt },
  };
}

/**
 * readDeviceCookie returns what a device cookie names when it is well formed, signed with this
 * key and unexpired; null otherwise: a broken, altered or old cookie is no cookie, never an error.
 */
export function readDeviceCookie(secrets: SecretBox, value: string | undefined, now: number): DeviceCookie | null {
  if (!value || value.length > 200) return null;
  const parts = value.split(".");
  if (parts.length !== 4) return null;
  const [operatorId, nonce, expiresAt, signature] = parts as [string, string, string, string];
  const payload = `${operatorId}.${nonce}.${expiresAt}`;
  if (!sameBytes(Buffer.from(signature), Buffer.from(signatureOf(secrets, payload)))) return null;
  if (!/^\d{1,15}$/.test(expiresAt) || Number(expiresAt) <= now) return null;
  return { operatorId, idHash: sha256(nonce) };
}
