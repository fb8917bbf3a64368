-- When `crm secrets-key reset` gave a subscription a secret no receiver knows: SQLite's migration 0039 (its comment says why).
ALTER TABLE webhook_subscriptions ADD COLUMN secret_lost_at bigint;
UPDATE webhook_subscriptions SET secret_lost_at = disabled_at
  WHERE status = 'disabled' AND disabled_reason LIKE 'its signing secret was lost with the secrets key (crm secrets-key reset)%'
    AND (secret_rotated_at IS NULL OR secret_rotated_at < disabled_at);
