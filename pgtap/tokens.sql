-- functions/tokens.sql: harvest.create_api_token, list_api_tokens, revoke_api_token, authenticate_api_token.
BEGIN;
SELECT plan(34);

CREATE TEMP TABLE minted (name text PRIMARY KEY, secret text);
GRANT ALL ON minted TO PUBLIC;
INSERT INTO minted SELECT t.name, t.secret FROM harvest.create_api_token('ci-deploy', 'operate') AS t;
SELECT matches((SELECT secret FROM minted WHERE name = 'ci-deploy'), '^hvt_[0-9a-f]{64}$',
               'create_api_token() returns the secret: hvt_ and 64 hex digits');
SELECT is((SELECT t.secret_hash FROM harvest.api_tokens AS t WHERE t.name = 'ci-deploy'),
          (SELECT sha256(convert_to(secret, 'UTF8')) FROM minted WHERE name = 'ci-deploy'),
          'create_api_token() stores the SHA-256 of the secret');
SELECT ok(NOT EXISTS (SELECT 1 FROM harvest.api_tokens AS t, minted AS m WHERE t::text LIKE '%' || m.secret || '%'),
          'create_api_token() stores no secret');
SELECT results_eq($$SELECT a.name, a.scope FROM harvest.authenticate_api_token(
                        (SELECT sha256(convert_to(secret, 'UTF8')) FROM minted WHERE name = 'ci-deploy')) AS a$$,
                  $$VALUES ('ci-deploy'::text, 'operate'::text)$$,
                  'authenticate_api_token() of the secret''s hash: the token''s name and scope');
SELECT throws_ok($$SELECT * FROM harvest.authenticate_api_token(sha256('hvt_guess'::bytea))$$,
                 'HR020', 'the API token is unknown or revoked', 'authenticate_api_token() of an unknown token: HR020');
SELECT throws_ok($$SELECT * FROM harvest.create_api_token('ci-deploy', 'read')$$, 'HR021',
                 'a live API token named "ci-deploy" exists', 'create_api_token() of a live name: HR021');
SELECT throws_ok($$SELECT * FROM harvest.create_api_token('x', 'superuser')$$, 'HR001',
                 'unknown token scope "superuser"', 'create_api_token() of an unknown scope: HR001');
SELECT throws_ok($$SELECT * FROM harvest.create_api_token('  ', 'read')$$, 'HR001', NULL,
                 'create_api_token() of a blank name: HR001');
SELECT results_eq($$SELECT name, scope, revoked_at IS NULL FROM harvest.list_api_tokens()$$,
                  $$VALUES ('ci-deploy'::text, 'operate'::text, true)$$,
                  'list_api_tokens(): the live tokens, without secrets');
SELECT ok(harvest.revoke_api_token('ci-deploy') > 0, 'revoke_api_token() returns the revoked token''s id');
SELECT throws_ok($$SELECT * FROM harvest.authenticate_api_token(
                     (SELECT sha256(convert_to(secret, 'UTF8')) FROM minted WHERE name = 'ci-deploy'))$$,
                 'HR020', NULL, 'a revoked token authenticates nothing, in the same transaction already');
SELECT throws_ok($$SELECT harvest.revoke_api_token('ci-deploy')$$, 'HR002', 'no live API token named "ci-deploy"',
                 'revoke_api_token() of no live token: HR002');
SELECT is((SELECT count(*) FROM harvest.list_api_tokens()), 0::bigint, 'list_api_tokens() leaves revoked tokens out');
SELECT results_eq($$SELECT name, revoked_by FROM harvest.list_api_tokens(true)$$,
                  $$VALUES ('ci-deploy'::text, session_user::text COLLATE "default")$$,
                  'list_api_tokens(true) shows who revoked a token');
SELECT lives_ok($$INSERT INTO minted SELECT 'again', t.secret FROM harvest.create_api_token('ci-deploy', 'admin') AS t$$,
                'a revoked token''s name can be given to a new token');
SELECT results_eq($$SELECT name, revoked_at IS NULL FROM harvest.list_api_tokens(true, NULL, NULL, NULL, 1)$$,
                  $$VALUES ('ci-deploy'::text, true)$$, 'list_api_tokens(p_limit): live tokens first');
SELECT results_eq($$SELECT name, revoked_at IS NULL FROM harvest.list_api_tokens(true, false, 'ci-deploy', NULL, 5)$$,
                  $$VALUES ('ci-deploy'::text, false)$$, 'list_api_tokens(): after the live ones, the revoked ones');
SELECT is_empty($$SELECT * FROM harvest.list_api_tokens(true, true, 'ci-deploy', 1000000, 5)$$,
                'list_api_tokens(): nothing after the last revoked token');
SELECT throws_ok($$SELECT * FROM harvest.list_api_tokens(true, NULL, NULL, NULL, 0)$$, 'HR001', NULL,
                 'list_api_tokens(): a limit below 1: HR001');
SELECT results_eq($$SELECT operation, target, actor, details ->> 'scope' FROM harvest.audit_log
                    WHERE operation LIKE 'token.%' ORDER BY id$$,
                  $$VALUES ('token.create'::text, 'ci-deploy'::text, session_user::text COLLATE "default", 'operate'::text),
                           ('token.revoke', 'ci-deploy', session_user::text COLLATE "default", NULL),
                           ('token.create', 'ci-deploy', session_user::text COLLATE "default", 'admin')$$,
                  'tokens created and revoked are audited, with no secret');

-- Only an admin creates, lists and revokes; the web process authenticates as a reader,
-- who cannot read the hashes.
SET LOCAL ROLE harvest_operator;
SELECT throws_ok($$SELECT * FROM harvest.create_api_token('op', 'admin')$$, '42501', NULL,
                 'create_api_token(): refused to an operator');
SELECT throws_ok($$SELECT harvest.revoke_api_token('ci-deploy')$$, '42501', NULL,
                 'revoke_api_token(): refused to an operator');
SET LOCAL ROLE harvest_reader;
SELECT throws_ok($$SELECT count(*) FROM harvest.api_tokens$$, '42501', NULL,
                 'a reader cannot read the token table (its hashes)');
SELECT results_eq($$SELECT a.scope FROM harvest.authenticate_api_token(
                        (SELECT sha256(convert_to(secret, 'UTF8')) FROM minted WHERE name = 'again')) AS a$$,
                  $$VALUES ('admin'::text)$$, 'authenticate_api_token(): open to a reader');
RESET ROLE;

-- A token with a lifetime: listed with its expiry, refused from then on (the engine's clock).
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
INSERT INTO minted SELECT t.name, t.secret FROM harvest.create_api_token('brief', 'read', interval '1 day') AS t;
SELECT is((SELECT expires_at FROM harvest.list_api_tokens() WHERE name = 'brief'),
          timestamptz '2030-01-02 00:00:00+00', 'create_api_token() with a lifetime: listed with its expiry');
SET LOCAL harvest.fake_now = '2030-01-02 00:00:00+00';
SELECT throws_ok($$SELECT * FROM harvest.authenticate_api_token(
                       (SELECT sha256(convert_to(secret, 'UTF8')) FROM minted WHERE name = 'brief'))$$,
                 'HR020', 'the API token expired at 2030-01-02T00:00:00+00:00',
                 'authenticate_api_token() of an expired token: HR020 naming when');
SELECT throws_ok($$SELECT * FROM harvest.create_api_token('x', 'read', interval '0')$$, 'HR001',
                 'a token''s lifetime must be positive and at most 100 years, got 00:00:00',
                 'create_api_token() of a lifetime of zero: HR001');
SELECT is((SELECT details ->> 'expires_at' FROM harvest.audit_log
           WHERE operation = 'token.create' AND target = 'brief'), '2030-01-02T00:00:00Z',
          'the audit row of the create carries the expiry in UTC');

-- A day is 24 hours of UTC whatever the session's zone (New York springs forward on 10 March).
SET LOCAL TimeZone = 'America/New_York';
SET LOCAL harvest.fake_now = '2030-03-09 12:00:00+00';
SELECT is((SELECT t.expires_at FROM harvest.create_api_token('dst', 'read', interval '1 day') AS t),
          timestamptz '2030-03-10 12:00:00+00', 'create_api_token(): the lifetime counts days in UTC');

-- A token that sees no payloads (docs/security.md): created so, listed and authenticated with
-- payloads false (the web layer redacts what it answers); every other token sees them.
RESET TimeZone;
INSERT INTO minted SELECT t.name, t.secret FROM harvest.create_api_token('status-page', 'read', NULL, false) AS t;
SELECT results_eq($$SELECT a.name, a.scope, a.payloads FROM harvest.authenticate_api_token(
                        (SELECT sha256(convert_to(secret, 'UTF8')) FROM minted WHERE name = 'status-page')) AS a$$,
                  $$VALUES ('status-page'::text, 'read'::text, false)$$,
                  'authenticate_api_token(): a token made with payloads false says so');
SELECT is((SELECT a.payloads FROM harvest.authenticate_api_token(
               (SELECT sha256(convert_to(secret, 'UTF8')) FROM minted WHERE name = 'again')) AS a),
          true, 'authenticate_api_token(): a token made without p_payloads sees payloads');
SELECT results_eq($$SELECT name, payloads FROM harvest.list_api_tokens() WHERE name IN ('status-page', 'brief')
                    ORDER BY name$$,
                  $$VALUES ('brief'::text, true), ('status-page', false)$$,
                  'list_api_tokens(): each token''s payloads');
SELECT is((SELECT details ->> 'payloads' FROM harvest.audit_log
           WHERE operation = 'token.create' AND target = 'status-page'), 'false',
          'the audit row of the create carries payloads');
SELECT throws_ok($$SELECT * FROM harvest.create_api_token('x', 'read', NULL, NULL)$$, 'HR001', NULL,
                 'create_api_token() of a null payloads: HR001');
SELECT * FROM finish();
ROLLBACK;
