-- scheduled/now
SELECT clock_timestamp(), to_regclass($1) IS NOT NULL
