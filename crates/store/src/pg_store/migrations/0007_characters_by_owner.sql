-- Characters by owner: their listings (newest first, from a cursor) and the count that bounds
-- how many one key may have.
CREATE INDEX characters_by_owner ON characters (owner, id);
