-- API tokens of the management API (sql/api_tokens.sql, docs/auth.md). The secret is
-- made here, returned once by create_api_token and stored only as its SHA-256: a secret
-- of 244 random bits cannot be guessed from its hash, so a fast hash is enough (a slow
-- one defends low-entropy passwords, and would cost every request). harvest.web.auth
-- hashes the bearer token and asks authenticate_api_token, with no cache: a revoke
-- takes effect at the next request.

-- A new token named p_name with scope read, operate or admin (the roles harvest_reader,
-- harvest_operator, harvest_admin); returns its secret, which is never shown again.
-- p_expires_in: it authenticates nothing after that long (NULL: until it is revoked).
-- p_payloads false: the API shows it no payload (inputs, results, signal and update payloads,
-- failure details), only states and metadata (docs/security.md).
CREATE OR REPLACE FUNCTION harvest.create_api_token(
    p_name text, p_scope text, p_expires_in interval DEFAULT NULL, p_payloads boolean DEFAULT true
)
RETURNS TABLE (
    token_id bigint, name text, scope text, secret text, created_at timestamptz, expires_at timestamptz,
    payloads boolean
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_secret text;
    v_id bigint;
    v_now timestamptz := harvest.now();
    v_expires_at timestamptz;
BEGIN
    IF p_name IS NULL OR btrim(p_name) = '' OR length(p_name) > 100 THEN
        RAISE EXCEPTION 'token name "%" is empty or longer than 100 characters', coalesce(p_name, '')
            USING ERRCODE = 'HR001', HINT = 'name the token after who or what uses it, e.g. ci-deploy';
    END IF;
    IF p_scope IS NULL OR p_scope NOT IN ('read', 'operate', 'admin') THEN
        RAISE EXCEPTION 'unknown token scope "%"', coalesce(p_scope, '')
            USING ERRCODE = 'HR001', HINT = 'use read, operate or admin';
    END IF;
    -- (In seconds: 100 years as the CLI's durations count them, 365.25 days each.)
    IF p_payloads IS NULL THEN
        RAISE EXCEPTION 'a token''s payloads must be true or false, not null'
            USING ERRCODE = 'HR001', HINT = 'false: the token sees states and metadata, never a payload';
    END IF;
    IF p_expires_in IS NOT NULL
       AND (extract(EPOCH FROM p_expires_in) <= 0 OR extract(EPOCH FROM p_expires_in) > 3155760000) THEN
        RAISE EXCEPTION 'a token''s lifetime must be positive and at most 100 years, got %',
            harvest._interval_text(p_expires_in)
            USING ERRCODE = 'HR001', HINT = 'e.g. 90 days; leave it out for a token that lives until it is revoked';
    END IF;
    -- Days and months counted in UTC, not in the session's zone (a DST change in between
    -- would move the expiry by an hour).
    v_expires_at := (v_now AT TIME ZONE 'UTC' + p_expires_in) AT TIME ZONE 'UTC';
    -- gen_random_uuid() draws from the server's strong random source: two of them,
    -- less their fixed version and variant bits, are 244 random bits.
    v_secret := 'hvt_' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', '');
    BEGIN
        INSERT INTO harvest.api_tokens AS t (name, scope, secret_hash, created_at, created_by, expires_at, payloads)
        VALUES (p_name, p_scope, sha256(convert_to(v_secret, 'UTF8')), v_now, session_user, v_expires_at, p_payloads)
        RETURNING t.id INTO v_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'a live API token named "%" exists', p_name
            USING ERRCODE = 'HR021', HINT = 'revoke it first (harvest token revoke), or choose another name';
    END;
    PERFORM harvest._audit('token.create', p_name, NULL, jsonb_build_object(
        'token_id', v_id, 'scope', p_scope, 'payloads', p_payloads,
        'expires_at', to_char(v_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')));
    RETURN QUERY SELECT v_id, p_name, p_scope, v_secret, v_now, v_expires_at, p_payloads;
END;
$$;

-- The tokens, without their secrets (nor their hashes), live ones first (an expired one is
-- listed among them, with its expires_at, until it is revoked).
CREATE OR REPLACE FUNCTION harvest.list_api_tokens(
    p_include_revoked boolean DEFAULT false, p_after_revoked boolean DEFAULT NULL, p_after_name text DEFAULT NULL,
    p_after_id bigint DEFAULT NULL, p_limit integer DEFAULT NULL
)
RETURNS TABLE (
    token_id bigint, name text, scope text, created_at timestamptz, created_by text,
    revoked_at timestamptz, revoked_by text, expires_at timestamptz, payloads boolean
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit % is out of range 1..10000', p_limit USING ERRCODE = 'HR001',
            HINT = 'pass NULL for every token';
    END IF;
    -- Live tokens by name, then revoked ones by name and id, from the position (the last row
    -- a page gave: revoked or not, name, id), at most p_limit; NULL, every one. Each part is
    -- read in its order down api_tokens_live_name or api_tokens_revoked_name (revoked rows are
    -- kept for good: a token a tenant, rotated, piles them up; migration 0100). Planned with
    -- the values at each call (EXECUTE): a cached generic plan of the position's ORs reads all.
    RETURN QUERY EXECUTE $q$
    SELECT u.id, u.name, u.scope, u.created_at, u.created_by, u.revoked_at, u.revoked_by, u.expires_at,
        u.payloads
    FROM (
        (SELECT t.* FROM harvest.api_tokens AS t
         WHERE t.revoked_at IS NULL AND $2::boolean IS NOT TRUE AND ($3::text IS NULL OR t.name > $3)
         ORDER BY t.name
         LIMIT $5)
        UNION ALL
        (SELECT t.* FROM harvest.api_tokens AS t
         WHERE t.revoked_at IS NOT NULL AND coalesce($1, false)
           AND ($2::boolean IS NOT TRUE OR (t.name, t.id) > ($3, $4))
         ORDER BY t.name, t.id
         LIMIT $5)
    ) AS u
    ORDER BY u.revoked_at IS NOT NULL, u.name, u.id
    LIMIT $5
    $q$ USING p_include_revoked, p_after_revoked, p_after_name, p_after_id, p_limit;
END;
$$;

-- Revoke the live token named p_name: from the commit on it authenticates nothing.
CREATE OR REPLACE FUNCTION harvest.revoke_api_token(p_name text)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_id bigint;
BEGIN
    UPDATE harvest.api_tokens AS t SET revoked_at = harvest.now(), revoked_by = session_user
    WHERE t.name = p_name AND t.revoked_at IS NULL
    RETURNING t.id INTO v_id;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'no live API token named "%"', coalesce(p_name, '')
            USING ERRCODE = 'HR002', HINT = 'harvest token list shows the live tokens';
    END IF;
    PERFORM harvest._audit('token.revoke', p_name, NULL, jsonb_build_object('token_id', v_id));
    RETURN v_id;
END;
$$;

-- The name, scope and payloads (false: the API shows it no payload) of the live token whose
-- secret hashes to p_secret_hash; HR020 for
-- an unknown, revoked or expired one (the message names neither the hash nor the secret;
-- an expired one says so, to whoever holds its secret).
CREATE OR REPLACE FUNCTION harvest.authenticate_api_token(p_secret_hash bytea)
RETURNS TABLE (name text, scope text, payloads boolean)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_token harvest.api_tokens;
BEGIN
    SELECT * INTO v_token FROM harvest.api_tokens AS t
    WHERE t.secret_hash = p_secret_hash AND t.revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the API token is unknown or revoked'
            USING ERRCODE = 'HR020', HINT = 'pass a live token (harvest token create) as Authorization: Bearer <token>';
    END IF;
    IF v_token.expires_at <= harvest.now() THEN
        RAISE EXCEPTION 'the API token expired at %', harvest._iso_time(v_token.expires_at)
            USING ERRCODE = 'HR020', HINT = 'an admin creates a new token (harvest token create) and revokes this one';
    END IF;
    RETURN QUERY SELECT v_token.name, v_token.scope, v_token.payloads;
END;
$$;

-- Comments: \df+ harvest.* documents the API.
COMMENT ON FUNCTION harvest.create_api_token IS
'Create an API token of scope read, operate or admin and return its secret, shown this once (stored as its '
'SHA-256); p_expires_in bounds its life (NULL: until revoked); p_payloads false: the API shows it no payload; audited as token.create; HR001 for a bad name, scope '
'or lifetime, HR021 when a live token has the name. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.list_api_tokens IS
'The API tokens (live ones by name, or all with p_include_revoked, revoked ones after) with scope, payloads, '
'creator and revocation, at most p_limit (1..10000; NULL: all) after the position (p_after_revoked, p_after_name, p_after_id), '
'never a secret or '
'hash. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.revoke_api_token IS
'Revoke the live API token of that name; it authenticates nothing from the commit on; audited as token.revoke; '
'HR002 when none is live. For admins (role harvest_admin).';
COMMENT ON FUNCTION harvest.authenticate_api_token IS
'The name, scope and payloads flag of the live token whose secret has this SHA-256, or HR020 (unknown, revoked or expired). '
'Called by the '
'web process before it lowers its role to the scope''s (role harvest_reader).';
