-- Webhooks of tasks that reached a final status: written in the transaction that ended the
-- task, then delivered (claimed with a lease, like tasks) and retried by the relay.
CREATE TABLE webhooks (
    id text COLLATE "C" PRIMARY KEY,
    task_id text COLLATE "C" NOT NULL,
    status text NOT NULL,
    -- The next attempt (or the end of a claim's lease) while pending, else NULL: the record's
    -- next_attempt_ms, which is read from here (a claim moves only this column).
    due_ms bigint,
    -- The webhook as JSON text: the task in it keeps its params as they were written.
    record text NOT NULL
);
CREATE INDEX webhooks_by_task ON webhooks (task_id, id);
CREATE INDEX webhooks_due ON webhooks (due_ms, id) WHERE due_ms IS NOT NULL;
