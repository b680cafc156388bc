-- Ledger outcomes (PostgreSQL twin of sqlite/0008_ledger_outcomes.sql; same names, same rules):
-- a delivery also says whether the work behind it finished, and who holds it right now.
--
-- Deliveries made before this version read 'in_progress': the ledger never learned whether
-- their work finished, and running it again (a `deliver --run` retry) is the side that loses
-- nothing; reading them 'completed' would skip work that may never have been done.
ALTER TABLE deliveries ADD COLUMN state TEXT NOT NULL DEFAULT 'in_progress'
    CHECK (state IN ('in_progress', 'completed'));
-- The result as canonical JSON text (NULL: none was given), who reported it and when.
ALTER TABLE deliveries ADD COLUMN result TEXT;
ALTER TABLE deliveries ADD COLUMN completed_at DOUBLE PRECISION;
ALTER TABLE deliveries ADD COLUMN completed_by TEXT;
-- The live claim of an execution running the work (all NULL: nobody holds one). A claim is
-- live while it is younger than the claim_ttl of the request that finds it.
ALTER TABLE deliveries ADD COLUMN claim_token TEXT;
ALTER TABLE deliveries ADD COLUMN claimed_by TEXT;
ALTER TABLE deliveries ADD COLUMN claimed_at DOUBLE PRECISION;

-- What each request did with the claim: took it ('claimed'), took over an expired one
-- ('taken_over'), found a live one and was answered 409 ('in_flight'); NULL when it asked for
-- none. The claimer's exit_status arrives later, with its complete (0) or its release.
ALTER TABLE attempts ADD COLUMN claim TEXT
    CHECK (claim IN ('claimed', 'taken_over', 'in_flight'));
ALTER TABLE attempts ADD COLUMN claim_token TEXT;
ALTER TABLE attempts ADD COLUMN exit_status INTEGER;
