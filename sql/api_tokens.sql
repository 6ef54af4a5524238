-- API tokens of the management API (functions/tokens.sql, docs/auth.md): a name, a
-- scope (read, operate, admin: the roles harvest_reader, harvest_operator and
-- harvest_admin) and the SHA-256 of the secret, never the secret itself. A revoked
-- token keeps its row (who revoked it, when) and no longer authenticates; its name
-- may be given to a new token. A token with expires_at authenticates nothing from then on
-- (it keeps its name until it is revoked). A token with payloads false sees states and
-- metadata through the API and never a payload (docs/security.md): the web layer redacts
-- every answer it gives such a token.

CREATE TABLE harvest.api_tokens (
    id bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    scope text NOT NULL,
    secret_hash bytea NOT NULL,
    created_at timestamptz NOT NULL,
    created_by text NOT NULL,
    revoked_at timestamptz,
    revoked_by text,
    expires_at timestamptz,
    payloads boolean NOT NULL DEFAULT true,
    CONSTRAINT api_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT api_tokens_scope_known CHECK (scope IN ('read', 'operate', 'admin')),
    CONSTRAINT api_tokens_name_shape CHECK (btrim(name) <> '' AND length(name) <= 100),
    CONSTRAINT api_tokens_secret_hash_sha256 CHECK (octet_length(secret_hash) = 32)
);

-- Authentication is one probe of this index per request.
CREATE UNIQUE INDEX api_tokens_secret_hash
ON harvest.api_tokens (secret_hash);

-- One live token per name (revoke is by name).
CREATE UNIQUE INDEX api_tokens_live_name
ON harvest.api_tokens (name) WHERE revoked_at IS NULL;

-- The revoked tokens in the list's order (name, id): a page of them reads a page (migration 0100).
CREATE INDEX api_tokens_revoked_name
ON harvest.api_tokens (name, id) WHERE revoked_at IS NOT NULL;
