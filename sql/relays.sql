-- Relay rows: an effect on another execution (a child's end reaching its parent,
-- a parent's end reaching its children), written in the same transaction as its
-- cause and delivered without ever waiting on the target's lock.

CREATE TABLE harvest.relays (
    id bigint GENERATED ALWAYS AS IDENTITY,
    target_execution_id uuid NOT NULL,
    kind text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL,
    CONSTRAINT relays_pkey PRIMARY KEY (id),
    CONSTRAINT relays_kind_check CHECK (kind IN ('child_closed', 'parent_closed'))
);
