-- 0077: an API token may expire (docs/auth.md): harvest.api_tokens.expires_at (NULL, the
-- default and every token made before, never expires), create_api_token's p_expires_in,
-- list_api_tokens' expires_at, and authenticate_api_token refusing a token past it. The old
-- signatures go here; the new ones are installed with the functions, after the migrations.
ALTER TABLE harvest.api_tokens ADD COLUMN expires_at timestamptz;
DROP FUNCTION IF EXISTS harvest.create_api_token(text, text);
DROP FUNCTION IF EXISTS harvest.list_api_tokens(boolean);
