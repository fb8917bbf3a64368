-- A secret rotation wizard's test ping sent by a crm before this one was signed with the previous
-- secret too, so its success does not show that the receiver verifies with the new one: a
-- receiver still on the old secret accepted it, and the wizard then let the operator retire that
-- secret, after which every delivery was refused. Such a test of a rotation whose previous secret
-- is still kept is forgotten: the wizard asks for another, signed with the new secret alone.
UPDATE webhook_subscriptions SET secret_test_delivery_id = NULL WHERE secret_test_delivery_id IS NOT NULL AND previous_secret IS NOT NULL;
