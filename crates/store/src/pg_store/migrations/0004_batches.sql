-- Message batches: the record as jsonb, and as columns what the indexes read; `open` until
-- the batch has ended (the batches a restarted relay picks up).
CREATE TABLE batches (
    id text COLLATE "C" PRIMARY KEY,
    owner text COLLATE "C" NOT NULL,
    open boolean NOT NULL,
    record jsonb NOT NULL
);
CREATE INDEX batches_by_owner ON batches (owner, id);
CREATE INDEX batches_open ON batches (id) WHERE open;

-- A batch's requests, by their place in it: the request (its params as the JSON text they
-- were written as) with its result once it has one. A result is written in the same
-- transaction as its charge's ledger entry.
CREATE TABLE batch_items (
    batch_id text COLLATE "C" NOT NULL,
    idx integer NOT NULL,
    item text NOT NULL,
    PRIMARY KEY (batch_id, idx)
);
