-- walpath/publication
SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
	EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = $1 AND p.pubinsert AND (p.puballtables OR EXISTS (
		SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass($2))))
