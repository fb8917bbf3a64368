-- The sign-in throttle keeps an email typed at sign-in as a keyed hash (operators/service.ts,
-- emailSubject), no longer as typed: what is typed there is kept for the 15-minute window, a
-- customer's address or a typo as well as an operator's. The failures counted by email before are
-- forgotten rather than left in clear until they age out; an upgrade forgives at most one window.
-- An address's failures hold no email and are kept.
DELETE FROM login_failures WHERE scope <> 'address';
DELETE FROM sign_in_turns WHERE pace_key LIKE 'account:%';
