-- Removing an operator now withdraws the one-time links they made (invitations, password resets),
-- which before outlived them for up to 72 hours: a reset link made for a colleague set that
-- colleague's password, and an invitation of an address of their own made them an operator again.
-- The links made by an operator removed before this version are withdrawn here. A link made from
-- the command line names no operator and stays.
DELETE FROM operator_links WHERE created_by IS NOT NULL AND created_by NOT IN (SELECT id FROM operators);
