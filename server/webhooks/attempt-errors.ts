/**
 * redirectError is the error of an attempt answered with the redirect `status`, the answer's
 * Location `named` or not. The Location is left to the response headers kept: a moved receiver's
 * new address carries its credentials as a target URL does, and the error is logged with every attempt.
 * It is here, not in delivery.ts, for the store too (eraseAttemptsOfEvents rewords older errors), which has no business with the HTTP dispatch.
 */
export function redirectError(status: number, named: boolean): string {
  return `redirect (${status}) not followed; point the subscription at the final URL${named ? ", which the answer's Location header names" : ""}`;
}
