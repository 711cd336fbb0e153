-- Characters of the first format (POST /v1/videos/characters): written once, read by id.
CREATE TABLE characters (
    id text COLLATE "C" PRIMARY KEY,
    owner text COLLATE "C" NOT NULL,
    -- The character as JSON text.
    record text NOT NULL
);
