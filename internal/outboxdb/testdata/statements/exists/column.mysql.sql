-- exists/column
SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = ?1 AND column_name = ?2)
