-- The ledger's counters move with the attempt row that every request inserts: one trigger
-- bumps "attempts" and the counter of the attempt's outcome, inside the statement that records
-- it, so a request is one statement fewer (and no Python round trip) and the counters can never
-- miss an attempt. The counters stay separate rows: purge deletes attempts, never counters.
-- (PostgreSQL bumps spread counter rows from the request instead: see postgres/0005.)
--
-- The migration runner splits scripts on lines that end in ";", so the trigger body keeps its
-- inner ";" inside a line and only "END;" ends one.
CREATE TRIGGER ackledger_attempts_count_ledger AFTER INSERT ON ackledger_attempts
BEGIN
    INSERT INTO ackledger_counters (name, value) VALUES ('ledger.attempts', 1), (CASE NEW.outcome
        WHEN 'applied' THEN 'ledger.deliveries' WHEN 'duplicate' THEN 'ledger.duplicates'
        ELSE 'ledger.conflicts' END, 1)
        ON CONFLICT (name) DO UPDATE SET value = ackledger_counters.value + 1; END;
