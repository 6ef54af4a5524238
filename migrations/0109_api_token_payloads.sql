-- 0109: an API token may see no payloads (docs/security.md, "Tokens that see no payloads"):
-- harvest.api_tokens.payloads (true, the default and every token made before, sees them; false:
-- the web layer redacts every answer it gives the token), create_api_token's p_payloads, and
-- list_api_tokens and authenticate_api_token answering it. The old signatures go here; the new
-- ones are installed with the functions, after the migrations.
ALTER TABLE harvest.api_tokens ADD COLUMN IF NOT EXISTS payloads boolean NOT NULL DEFAULT true;
DROP FUNCTION IF EXISTS harvest.create_api_token(text, text, interval);
DROP FUNCTION IF EXISTS harvest.list_api_tokens(boolean, boolean, text, bigint, integer);
DROP FUNCTION IF EXISTS harvest.authenticate_api_token(bytea);
