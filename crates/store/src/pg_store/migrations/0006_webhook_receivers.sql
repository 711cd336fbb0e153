-- A webhook's owner and URL as columns, so that a claim chooses by receiver reading the due
-- rows' receivers only, not their records.
ALTER TABLE webhooks ADD COLUMN owner text COLLATE "C", ADD COLUMN url text;
UPDATE webhooks SET owner = (record::jsonb)->>'owner', url = (record::jsonb)->>'url';
ALTER TABLE webhooks ALTER COLUMN owner SET NOT NULL, ALTER COLUMN url SET NOT NULL;
