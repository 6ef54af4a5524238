-- 0115: the rate-limit override and its clear name who made them, as the start throttle's do
-- (`harvest rate-limit override|clear-override --operator-id`, the routes' operator_id):
-- set_rate_limit_override and clear_rate_limit_override take p_operator_id, written to their
-- audit rows. The old signatures go here; the new ones are installed with the functions, after
-- the migrations.
DROP FUNCTION IF EXISTS harvest.set_rate_limit_override(text, double precision, double precision, double precision);
DROP FUNCTION IF EXISTS harvest.clear_rate_limit_override(text);
