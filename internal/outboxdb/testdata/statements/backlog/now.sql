-- backlog/now
SELECT now(), to_regclass($1) IS NOT NULL
