-- Room on each page of tasks for a task's next row version beside the one it replaces, so
-- that an update changing no indexed column (a submission's mark) is a heap-only update that
-- writes no index entry. Pages written from now on keep a fifth free.
ALTER TABLE tasks SET (fillfactor = 80);

-- Raised by a statement that finds what it wrote must not be committed (a group of task
-- creations whose pre-deductions a key's quota does not cover, or a key not there): its
-- transaction is rolled back, and the step decides again, creation by creation.
CREATE FUNCTION relay_refuse(reason text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'RL001', MESSAGE = reason;
END
$$;
