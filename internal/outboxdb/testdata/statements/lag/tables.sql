-- lag/tables
SELECT now(), to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL
