-- 0120: the search attributes the schema owner indexed for range tests (`harvest search-attr
-- index`), recorded so that `harvest migrate run` builds each one on a database it migrates (a
-- shard added later) and rebuilds one an interrupted build left INVALID. The indexes are the
-- owner's (docs/operations.md, "Indexing a search attribute for range tests"); this table is
-- only the record of them. IF NOT EXISTS: a migration may run again (CONTRIBUTING.md).
CREATE TABLE IF NOT EXISTS harvest.search_attribute_indexes (
    name text NOT NULL,
    type text NOT NULL,
    index_name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT search_attribute_indexes_pkey PRIMARY KEY (name),
    CONSTRAINT search_attribute_indexes_index_name_key UNIQUE (index_name),
    CONSTRAINT search_attribute_indexes_name_check CHECK (name ~ '^[A-Za-z0-9_.\-]+$'),
    CONSTRAINT search_attribute_indexes_type_check CHECK (type IN ('number', 'text'))
);
