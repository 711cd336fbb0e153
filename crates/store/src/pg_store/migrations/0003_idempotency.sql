-- Idempotency records: the answer a request with an Idempotency-Key got, per API key, kept
-- for a day (swept by claim time). A task's creation completes its record in the same
-- transaction.
CREATE TABLE idempotency (
    key_id text COLLATE "C" NOT NULL,
    idem_key text COLLATE "C" NOT NULL,
    -- When the key was claimed (ms since the epoch): the record's created_ms.
    created_ms bigint NOT NULL,
    -- The record as JSON text.
    record text NOT NULL,
    PRIMARY KEY (key_id, idem_key)
);
CREATE INDEX idempotency_by_time ON idempotency (created_ms);
