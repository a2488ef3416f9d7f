-- pending-index/exists
SELECT EXISTS (SELECT 1 FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = ?1 AND index_name = ?2)
