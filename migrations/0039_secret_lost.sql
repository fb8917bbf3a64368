-- When `crm secrets-key reset` gave a subscription a new secret no receiver knows (its own was lost
-- with the key); cleared by the next rotation. Until then enable is refused: the subscription would
-- sign with that secret. Null: its secret is one it showed. Subscriptions a reset disabled before
-- this column (by its reason) and not rotated since are marked too.
ALTER TABLE webhook_subscriptions ADD COLUMN secret_lost_at INTEGER;
UPDATE webhook_subscriptions SET secret_lost_at = disabled_at
  WHERE status = 'disabled' AND disabled_reason LIKE 'its signing secret was lost with the secrets key (crm secrets-key reset)%'
    AND (secret_rotated_at IS NULL OR secret_rotated_at < disabled_at);
