-- The relay's state, first version. Ids and owners compare byte by byte (COLLATE "C"), as the
-- embedded backend's keys do, whatever the database's collation.

-- Tasks: the record (less `params`) as jsonb, `params` as the JSON text it was written as, and
-- as columns what the indexes and the listings read.
CREATE TABLE tasks (
    id text COLLATE "C" PRIMARY KEY,
    -- The creation-time order of ids of every kind: the ULID after the id's last `_`.
    created text COLLATE "C" NOT NULL,
    owner text COLLATE "C" NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,
    model text NOT NULL,
    -- When the engine is to look at the task next: its next_poll_ms (claims move it to the end
    -- of their lease), 9223372036854775807 when an unfinished task has none, NULL once final.
    due_ms bigint,
    params text NOT NULL,
    record jsonb NOT NULL
);
CREATE INDEX tasks_by_owner ON tasks (owner, kind, id);
CREATE INDEX tasks_by_owner_created ON tasks (owner, created, id);
CREATE INDEX tasks_by_created ON tasks (created, id);
CREATE INDEX tasks_due ON tasks (due_ms, id) WHERE due_ms IS NOT NULL;

CREATE TABLE keys (
    id text COLLATE "C" PRIMARY KEY,
    hash text NOT NULL CONSTRAINT keys_hash_unique UNIQUE,
    record jsonb NOT NULL
);

-- One counter orders a key's task entries and its charges together.
CREATE SEQUENCE ledger_seq;

-- Entries of tasks (pre-deduction, settlement, refund): one per task and kind.
CREATE TABLE ledger (
    seq bigint PRIMARY KEY,
    id text NOT NULL,
    key_id text COLLATE "C" NOT NULL,
    task_id text COLLATE "C" NOT NULL,
    kind text NOT NULL,
    amount bigint NOT NULL,
    balance_after bigint,
    at bigint NOT NULL,
    CONSTRAINT ledger_task_kind_unique UNIQUE (task_id, kind)
);
CREATE INDEX ledger_by_key ON ledger (key_id, seq);

-- Charges of work without a task (chat messages): a batch shares one number of ledger_seq,
-- `ord` is the place in it. No uniqueness: a charge id is given once by its caller.
CREATE TABLE usage (
    seq bigint NOT NULL,
    ord integer NOT NULL,
    id text NOT NULL,
    key_id text COLLATE "C" NOT NULL,
    task_id text COLLATE "C" NOT NULL,
    amount bigint NOT NULL,
    balance_after bigint,
    at bigint NOT NULL,
    PRIMARY KEY (seq, ord)
);
CREATE INDEX usage_by_key ON usage (key_id, seq, ord);

CREATE TABLE meta (
    name text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL
);

-- Asset libraries; `asset_count` lives in the record and changes with every asset creation
-- and deletion, under the library's row lock.
CREATE TABLE libraries (
    id text COLLATE "C" PRIMARY KEY,
    owner text COLLATE "C" NOT NULL,
    record jsonb NOT NULL
);
CREATE INDEX libraries_by_owner ON libraries (owner, id);

CREATE TABLE assets (
    id text COLLATE "C" PRIMARY KEY,
    library_id text COLLATE "C" NOT NULL,
    status text NOT NULL,
    asset_type text,
    -- expires_at while the asset is active, else NULL.
    expiry bigint,
    record jsonb NOT NULL
);
CREATE INDEX assets_by_library ON assets (library_id, id);
CREATE INDEX assets_processing ON assets (id) WHERE status = 'processing';
CREATE INDEX assets_by_expiry ON assets (expiry, id) WHERE expiry IS NOT NULL;
