-- 0096: an audit row records the role its action used (re-runnable).
--
-- The audit log recorded who the caller said acted (actor) and the login that made the call
-- (login), but not what it was allowed: the web process writes every row as its one login,
-- whatever token's scope it set with SET ROLE for the request. acting_role is that role, the
-- one the session set, else the login (harvest._session_role()); rows written before stay NULL
-- (unknown, not guessed).
ALTER TABLE harvest.audit_log ADD COLUMN IF NOT EXISTS acting_role text;
